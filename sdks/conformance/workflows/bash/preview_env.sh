# Conformance: the preview-environment shape (deploy, park on an event, tear down).
source "$CRYO_PRELUDE"
echo pass
env=$(cryo_step deploy -- sh -c 'echo deploying >&2; echo pr-7')
echo "env=$env"
closed=$(cryo_wait_event pr.closed)
echo "closed=$closed"
cryo_step teardown -- sh -c 'echo "tearing down $1" >&2; echo true' sh "$env" >/dev/null
echo done
