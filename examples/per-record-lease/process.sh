#!/bin/sh
# Work on one record for a moment. Two workers on one record at once would be the bug the
# lease prevents: the second mkdir would fail and say so.
set -eu
mark="working-on-record-$1"
if ! mkdir "$mark" 2>/dev/null; then
    echo "record $1: another worker holds it"
    exit 1
fi
echo "record $1: start"
sleep 2
echo "record $1: done"
rmdir "$mark"
echo "record $1" >> processed.txt
