"""Compare the PTX of every kernel in two nvcc -ptx outputs: lists the kernels that changed, appeared or disappeared.
Used to show that a change leaves the benchmarked kernels as they were.
    python3 bench/ptx_diff.py before.ptx after.ptx

The anonymous namespace's mangled name (it hashes the source path) and branch labels are normalised away, so the
two files may come from different checkouts. A kernel that is gone under one name and new under another with the
same PTX (a template argument list that changed its mangling only) is reported as renamed, not as changed."""
import re
import sys

ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")


def _static_shared(m):
    """_ZZ<enclosing function>E<n><name> (a function's static variable) -> STATIC_<name>: a device function that holds
    the variable (a kernel body moved into a __forceinline__ function) changes the mangled name, not the code."""
    name = m.group(0)
    for cut in range(len(name) - 1, 3, -1):
        tail = re.fullmatch(r"E(\d+)(\w+)", name[cut:])
        if tail and len(tail.group(2)) == int(tail.group(1)):
            return "STATIC_" + tail.group(2)
    return name


def kernels(path):
    text = ANON.sub("ANON", open(path).read())
    text = re.sub(r"_ZZ\w+", _static_shared, text)
    text = re.sub(r"\$L__BB\d+_\d+", "L", text)
    parts = re.split(r"\n(?=(?:\.visible |\.weak )?\.entry )", text)
    out = {}
    for part in parts[1:]:
        name = re.match(r"(?:\.visible |\.weak )?\.entry (\S+?)\(", part).group(1)
        out[name] = part.split("\n}\n")[0]
    return out


def main(before, after):
    a, b = kernels(before), kernels(after)
    # the kernel's name, and its mangled name inside the names of its static shared variables (_ZZ<name>E4nred)
    unnamed = lambda ks, name: ks[name].replace(name, "KERNEL").replace(name[2:], "KERNEL")  # noqa: E731
    new_bodies = {unnamed(b, n): n for n in b.keys() - a.keys()}
    renamed = set()
    for name in sorted(a.keys() - b.keys()):
        match = new_bodies.get(unnamed(a, name))
        if match:
            print(f"renamed {name} -> {match} (same PTX)")
            renamed.add(match)
        else:
            print("gone   ", name)
    for name in sorted(b.keys() - a.keys() - renamed):
        print("new    ", name)
    changed = sorted(n for n in a.keys() & b.keys() if a[n] != b[n])
    for name in changed:
        print("changed", name)
    same = len(a.keys() & b.keys()) - len(changed) + len(renamed)
    print(f"{len(a)} kernels before, {len(b)} after, {same} with the same PTX")


if __name__ == "__main__":
    main(*sys.argv[1:3])
