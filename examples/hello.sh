#!/usr/bin/env bash
# A step, a sleep and a second step: the second pass replays `count` from the journal.
n=$(cryopg step count -- sh -c 'echo 41')
echo "before sleep: $n"
cryopg sleep 2s
r=$(cryopg step add -- sh -c "echo \$(( $n + 1 ))")
echo "after sleep: $r"
