#!/bin/sh
set -u
# A: the release build of 7b7c38d; B: the same plus the writer yield (not committed).
A=/work/wt-u45/target/peers/tidings-7b7c38d
B=/work/wt-u45/target/release/tidings
OUT=/tmp/u45-ab
mkdir -p $OUT
for rep in 1 2 3; do
  echo "rep $rep A: $(uptime)"
  $A bench subscribers --transports udp --counts 10,1000 --reps 1 --busy 1 --out $OUT/a-busy-$rep > $OUT/a-$rep.log 2>&1
  echo "rep $rep B: $(uptime)"
  $B bench subscribers --transports udp --counts 10,1000 --reps 1 --busy 1 --out $OUT/b-busy-$rep > $OUT/b-$rep.log 2>&1
done
echo "end: $(uptime)"
