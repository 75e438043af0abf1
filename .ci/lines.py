#!/usr/bin/env python3
"""Counts a crate's source lines as the closing notes quote them: blank and comment-only lines
are left out; `#[cfg(test)]` modules and files named tests*.rs / *_tests.rs or under tests/ count
as test lines, the rest as non-test lines. Not run by CI: a figure's command.

Usage: python3 .ci/lines.py crates/bench/src [crates/broker/src ...]
"""
import os
import sys


def count(root):
    non_test = test = 0
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith('.rs'):
                continue
            path = os.path.join(folder, name)
            test_file = name.startswith('tests') or name.endswith('_tests.rs') or '/tests/' in path
            in_test = pending = False
            depth = 0
            for line in open(path, encoding='utf-8').read().split('\n'):
                text = line.strip()
                if not text or text.startswith('//'):
                    continue
                if test_file:
                    test += 1
                    continue
                if not in_test and text.startswith('#[cfg(test)]'):
                    pending = True
                    test += 1
                    continue
                if pending and not in_test:
                    pending = False
                    if text.endswith(';'):  # `mod tests;`: its file counts on its own
                        test += 1
                        continue
                    in_test, depth = True, 0
                if in_test:
                    depth += line.count('{') - line.count('}')
                    test += 1
                    if depth <= 0 and '}' in line:
                        in_test = False
                    continue
                non_test += 1
    return non_test, test


if __name__ == '__main__':
    for root in sys.argv[1:]:
        non_test, test = count(root)
        print(f'{root}: {non_test} non-test, {test} test')
