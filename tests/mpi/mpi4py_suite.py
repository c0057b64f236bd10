"""Runs mpi4py's own test suite (its test/ folder, not ours) on every rank, module by module.

    mpi4py_suite.py <mpi4py test dir> [--modules a,b,...] [--skip FILE] [--verbose]

Every rank runs the same modules and skips the same test cases, so that their collective calls
meet. A test case is skipped only by name, with its reason, as FILE lists them: one per line,
"<module>.<class>.<method>  <reason>", where the class may be "*" (every class of the module
that has the method) or the method "*" (every case of the class); blank lines and lines starting with "#" are ignored. A listed case that no
module has fails the run, so the list cannot outlive what it names.

Rank 0 prints one line per module ("mpi4py: <module>: <run> run, <skipped> skipped, <failed>
failed") and, when every rank passed every module, "mpi4py suite: OK (<n> modules, <ranks>
ranks)". Every rank exits non-zero when any of its cases failed or raised.
"""

import argparse
import os
import sys
import unittest


def read_skips(path):
    skips = {}
    if not path:
        return skips
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            if not reason.strip():
                sys.exit(f"mpi4py_suite: {path}: '{name}' has no reason")
            skips[name] = reason.strip()
    return skips


def cases(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from cases(t)
        else:
            yield t


def skip_listed(suite, module, skips, used):
    for t in cases(suite):
        cls = type(t).__name__
        method = getattr(t, "_testMethodName", "")
        for name in (f"{module}.{cls}.{method}", f"{module}.*.{method}", f"{module}.{cls}.*"):
            reason = skips.get(name)
            if reason is None:
                continue
            used.add(name)

            def skipped(reason=reason, t=t):
                t.skipTest(reason)

            setattr(t, method, skipped)
            break


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("testdir")
    parser.add_argument("--modules", default="")
    parser.add_argument("--skip", default="")
    parser.add_argument("--verbose", action="store_true", help="name every case as it runs")
    args = parser.parse_args()

    sys.path.insert(0, args.testdir)
    sys.dont_write_bytecode = True
    # mpi4py's runner sets up the module and the tests' own helpers (skipMPI, the array kinds).
    import runtests  # noqa: E402  (from testdir)

    options, _ = runtests.getoptionparser().parse_args(["--no-builddir", "-q"])
    runtests.setup_python(options)
    runtests.setup_unittest(options)
    runtests.import_package(options, "mpi4py")
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    size = MPI.COMM_WORLD.Get_size()
    if args.modules:
        modules = args.modules.split(",")
    else:
        modules = sorted(
            f[:-3]
            for f in os.listdir(args.testdir)
            if f.startswith("test_") and f.endswith(".py")
        )
    skips = read_skips(args.skip)
    used = set()
    failed_modules = []
    # Module output of every rank goes to its stderr; rank 0's summary lines to stdout.
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2 if args.verbose else 0)
    for module in modules:
        suite = unittest.TestLoader().loadTestsFromModule(__import__(module))
        skip_listed(suite, module, skips, used)
        result = runner.run(suite)
        bad = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
        # The worst of every rank's counts, so that rank 0 speaks for all of them.
        bad = MPI.COMM_WORLD.allreduce(bad, op=MPI.MAX)
        if rank == 0:
            print(
                f"mpi4py: {module}: {result.testsRun} run, {len(result.skipped)} skipped, "
                f"{bad} failed",
                flush=True,
            )
        if bad:
            failed_modules.append(module)
    unknown = sorted(set(n for n in skips if n.split(".")[0] in modules) - used)
    if unknown:
        print(f"mpi4py_suite: the skip list names cases no module has: {unknown}", flush=True)
        failed_modules.append("(skip list)")
    if rank == 0:
        if failed_modules:
            print(f"mpi4py suite: FAILED in {', '.join(failed_modules)}", flush=True)
        else:
            print(f"mpi4py suite: OK ({len(modules)} modules, {size} ranks)", flush=True)
    return 1 if failed_modules else 0


if __name__ == "__main__":
    sys.exit(main())
