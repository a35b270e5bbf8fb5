"""Compare the PTX of every kernel in two nvcc -ptx outputs (names and labels normalised): lists the kernels that
changed, appeared or disappeared. Used to show that a change leaves the benchmarked kernels as they were.
    python3 bench/ptx_diff.py before.ptx after.ptx"""
import re
import sys


def kernels(path):
    text = open(path).read()
    text = re.sub(r"_GLOBAL__N__[0-9a-f_]+", "G", text)
    text = re.sub(r"\$L__BB\d+_\d+", "L", text)
    parts = re.split(r"\n(?=(?:\.visible |\.weak )?\.entry )", text)
    out = {}
    for part in parts[1:]:
        name = re.match(r"(?:\.visible |\.weak )?\.entry (\S+?)\(", part).group(1)
        out[name] = part.split("\n}\n")[0]
    return out


def main(before, after):
    a, b = kernels(before), kernels(after)
    for name in sorted(a.keys() | b.keys()):
        if name not in b:
            print("gone   ", name)
        elif name not in a:
            print("new    ", name)
        elif a[name] != b[name]:
            print("changed", name)
    print(f"{len(a)} kernels before, {len(b)} after, {sum(a.get(k) == b.get(k) for k in a)} unchanged")


if __name__ == "__main__":
    main(*sys.argv[1:3])
