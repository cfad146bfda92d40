#!/usr/bin/env bash
# The same in bash. `cryopg lock GROUP -- CMD` runs CMD without the agent socket, so the
# durable calls stay in the script: take the bare lease (held until the run ends) and
# count with the recorded `state incr`.
set -euo pipefail
cryopg lock tally
total=$(cryopg state incr total --entity tally --as count-me)
cryopg sleep 1s
echo "counted once: total is $total"
