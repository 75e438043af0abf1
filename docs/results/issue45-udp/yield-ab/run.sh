#!/bin/sh
set -u
# A: a release build of 7b7c38d; B: the same plus the writer yield (not committed). From the
# repository's root: A=PATH B=PATH sh docs/results/issue45-udp/yield-ab/run.sh
A=${A:?a release build of 7b7c38d}
B=${B:?the same build with the writer yield}
OUT=${OUT:-target/u45-ab}
mkdir -p $OUT
for rep in 1 2 3; do
  echo "rep $rep A: $(uptime)"
  $A bench subscribers --transports udp --counts 10,1000 --reps 1 --busy 1 --out $OUT/a-busy-$rep > $OUT/a-$rep.log 2>&1
  echo "rep $rep B: $(uptime)"
  $B bench subscribers --transports udp --counts 10,1000 --reps 1 --busy 1 --out $OUT/b-busy-$rep > $OUT/b-$rep.log 2>&1
done
echo "end: $(uptime)"
