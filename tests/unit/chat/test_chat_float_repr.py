#!/usr/bin/python3
"""Differential test of the M3 plugin's float spellings against Python itself.

Python's repr(float) is what the chat template prints (Jinja `{{ x }}`, `tojson`); serde_json/ryu is what vLLM
writes into tool-call arguments. Both use the shortest round-trip digits; ryu's layout is rebuilt here from
Python's digits (fixed notation for decimal exponents -5 < k <= 16, else `d.ddde<exp>` with no `+` and no
padding). Usage: test_chat_float_repr.py PATH_TO_chat_floatfmt"""
import random
import struct
import subprocess
import sys


def ryu(x):
    if x != x or x in (float('inf'), float('-inf')):
        return 'null'
    sign = '-' if str(x).startswith('-') else ''
    ax = abs(x)
    if ax == 0:
        return sign + '0.0'
    r = repr(ax)
    mant, _, exp = r.partition('e')
    e = int(exp) if exp else 0
    whole, _, frac = mant.partition('.')
    digits = (whole + frac).lstrip('0')
    # decimal point position relative to the first significant digit
    lead_zeros = len((whole + frac)) - len((whole + frac).lstrip('0'))
    decpt = len(whole) + e - lead_zeros
    digits = digits.rstrip('0') or '0'
    n = len(digits)
    if -5 < decpt <= 16:
        if decpt <= 0:
            return sign + '0.' + '0' * (-decpt) + digits
        if decpt >= n:
            return sign + digits + '0' * (decpt - n) + '.0'
        return sign + digits[:decpt] + '.' + digits[decpt:]
    body = digits[0] + ('.' + digits[1:] if n > 1 else '')
    return sign + body + 'e' + str(decpt - 1)


def main():
    rng = random.Random(20240601)
    values = [0.0, -0.0, 1.0, 1.5, 100000.0, 1e-05, 1e-4, 1e16, 1e15, 1e22, 0.1, 0.3, 2.0 ** -1074, 2.0 ** 1023,
              1.7976931348623157e308, 2.2250738585072014e-308, 5e-324, 123456789.125, 9007199254740993.0,
              0.000123, 1e-7, 12345678901234567890.0, 2.0 ** 60, 2.0 ** -20, 4.35e-5]
    for i in range(-1074, 1024, 7):
        values.append(2.0 ** i)  # powers of two: where the shortest-digit search is asymmetric
    for i in range(-30, 30):
        values.append(10.0 ** i)
    while len(values) < 30000:
        bits = rng.getrandbits(64)
        x = struct.unpack('<d', struct.pack('<Q', bits))[0]
        if x == x and abs(x) != float('inf'):
            values.append(x)
        values.append(round(rng.uniform(-1e6, 1e6), rng.randint(0, 8)))
    text = ''.join('%016x\n' % struct.unpack('<Q', struct.pack('<d', v))[0] for v in values)
    out = subprocess.run([sys.argv[1]], input=text.encode(), capture_output=True, check=True).stdout.decode()
    lines = out.splitlines()
    if len(lines) != len(values):
        print('FAILED: %d lines for %d values' % (len(lines), len(values)))
        return 1
    bad = 0
    for v, line in zip(values, lines):
        py, serde = line.split(' ')
        if py != repr(v) or serde != ryu(v):
            bad += 1
            if bad <= 10:
                print('mismatch for %r: got py=%s serde=%s, want py=%s serde=%s' % (v, py, serde, repr(v), ryu(v)))
    print('%d passed, %d failed' % (len(values) - bad, bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
