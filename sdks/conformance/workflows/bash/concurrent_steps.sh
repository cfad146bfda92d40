# Conformance: six steps run concurrently (background jobs) and replay by identity.
source "$CRYO_PRELUDE"
echo pass
out=$(mktemp -d)
for i in 1 2 3 4 5 6; do
    cryo_step "p$i" -- sh -c "sleep 0.$((7 - i)); echo $i" > "$out/$i" &
done
wait
sum=0
for i in 1 2 3 4 5 6; do sum=$((sum + $(cat "$out/$i"))); done
rm -rf "$out"
echo "sum=$sum"
cryo_sleep 1s
echo "after sleep sum=$sum"
