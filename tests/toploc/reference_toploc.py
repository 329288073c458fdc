#!/usr/bin/env python3
"""An independent TOPLOC proof builder in plain Python (standard library only).

Written from specs/toploc.md §1-2, separately from src/toploc, to cross-check the C++ proofs byte
for byte (tests/toploc/reference_test.cpp). It shares no algorithm with the C++ beyond the spec:
top-k by a full sort, the modulus by sets, and interpolation in Lagrange form (the master
polynomial divided by each (x - x_i)) instead of Newton divided differences.

Input (stdin): one case per line, "k chunk_rows hidden v0 v1 ..." where the v are the bf16 bit
patterns of the rows (row-major, as decimal integers). Output: one line per case, the hex of the
concatenated chunk proofs (empty line for no rows).
"""
import sys

P = 65497


def top_k(values, k):
    for i, v in enumerate(values):
        if v & 0x7F80 == 0x7F80:
            raise ValueError(f"non-finite value at {i}")
    # Magnitude of a finite bf16 = its bits without the sign; ties: lower index first.
    order = sorted(range(len(values)), key=lambda i: (-(values[i] & 0x7FFF), i))
    return order[:k]


def injective_modulus(indices):
    for m in range(P, 0, -1):
        if len({i % m for i in indices}) == len(indices):
            return m
    raise ValueError("no injective modulus")


def poly_mul_linear(poly, a):
    """poly(x) * (x - a), coefficients ascending, mod P."""
    out = [0] * (len(poly) + 1)
    for d, c in enumerate(poly):
        out[d + 1] = (out[d + 1] + c) % P
        out[d] = (out[d] - a * c) % P
    return out


def poly_div_linear(poly, a):
    """poly(x) / (x - a) for a root a of poly, by synthetic division; ascending, mod P."""
    n = len(poly) - 1
    q = [0] * n
    carry = 0
    for d in range(n, 0, -1):
        carry = (poly[d] + carry * a) % P if d < n else poly[n]
        q[d - 1] = carry
    return q


def lagrange_coefficients(xs, ys):
    master = [1]
    for x in xs:
        master = poly_mul_linear(master, x)
    coeffs = [0] * len(xs)
    for x, y in zip(xs, ys):
        basis = poly_div_linear(master, x)  # prod_{j != i} (t - x_j)
        denom = 0
        for c in reversed(basis):
            denom = (denom * x + c) % P
        scale = y * pow(denom, P - 2, P) % P
        for d, c in enumerate(basis):
            coeffs[d] = (coeffs[d] + scale * c) % P
    return coeffs


def chunk_proof(values, k):
    idx = top_k(values, k)
    m = injective_modulus(idx)
    xs = [i % m for i in idx]
    ys = [values[i] % P for i in idx]
    coeffs = lagrange_coefficients(xs, ys)
    return m.to_bytes(2, "big") + b"".join(c.to_bytes(2, "big") for c in coeffs)


def sequence_proof(values, k, chunk_rows, hidden):
    rows = len(values) // hidden
    out = b""
    for first in range(0, rows, chunk_rows):
        last = min(rows, first + chunk_rows)
        out += chunk_proof(values[first * hidden:last * hidden], k)
    return out


def main():
    for line in sys.stdin:
        fields = [int(f) for f in line.split()]
        if not fields:
            continue
        k, chunk_rows, hidden, values = fields[0], fields[1], fields[2], fields[3:]
        print(sequence_proof(values, k, chunk_rows, hidden).hex())


if __name__ == "__main__":
    main()
