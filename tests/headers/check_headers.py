#!/usr/bin/env python3
"""What the public headers include: nothing from src/, tools/ or tests/, nothing that is not
installed, no library but the ones a user of gpuverbs has anyway.

    check_headers.py ROOT [--compiled HEADERS_TXT]
    check_headers.py --self-test

Every #include of every header under ROOT/include/gpuverbs/ must be one of:
  - "gpuverbs/..." or <gpuverbs/...> naming a header that exists under include/gpuverbs/ and is
    installed (cmake/install.cmake installs *.hpp, *.cuh, *.h there);
  - a header of the C or C++ standard library (no directory: <cstdint>, <time.h>);
  - rdma-core's <infiniband/...>, or a header of the CUDA toolkit (<cuda_runtime.h>,
    <cuda/atomic>, <cooperative_groups.h>, <cooperative_groups/...>).
A path that names a file under src/, tools/ or tests/ (the library's internals and the tools'
helpers, none of them installed), a relative path ("../", "./"), or any other library fails,
with the header, the line and the reason.

--compiled HEADERS_TXT: the list the header self-containment check (gv_header_check,
tests/headers/CMakeLists.txt) was generated from; a header missing from it fails (re-run cmake).
--self-test: runs the checker over a made-up tree with one leak of each kind; each must fail.
Exit status 0: all good; 1: the failures are listed.
"""
import os
import re
import sys
import tempfile

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
HEADER_EXTS = ('.hpp', '.cuh', '.h')
PRIVATE_DIRS = ('src', 'tools', 'tests')
# Libraries a header may use: rdma-core's verbs headers and the CUDA toolkit's.
EXTERNAL_OK = (
    re.compile(r'^infiniband/[A-Za-z0-9_]+\.h$'),
    re.compile(r'^cuda(_runtime|_runtime_api|_fp16|_bf16)?\.h$'),
    re.compile(r'^cuda/[a-z_/]+$'),  # libcu++: <cuda/atomic>, <cuda/std/...>
    re.compile(r'^cooperative_groups(\.h|/[a-z_]+\.h)$'),
)
# The C and C++ standard library (and POSIX headers of libc): a name without a directory.
STD_RE = re.compile(r'^[a-z_]+(\.h)?$')


def public_headers(root):
    base = os.path.join(root, 'include')
    out = []
    for d, _, files in os.walk(os.path.join(base, 'gpuverbs')):
        for f in files:
            if f.endswith(HEADER_EXTS):
                out.append(os.path.relpath(os.path.join(d, f), base))
    return sorted(out)


def check_include(root, header, kind, path):
    """The reason the include is wrong, or None."""
    if path.startswith(('./', '../')) or '/../' in path or path.startswith('/'):
        return 'a relative or absolute path (public headers include "gpuverbs/..." only)'
    for d in PRIVATE_DIRS:
        if os.path.isfile(os.path.join(root, d, path)):
            return 'names %s/%s, which is not installed (internals stay out of public headers)' % (d, path)
    if path.startswith('gpuverbs/'):
        if not os.path.isfile(os.path.join(root, 'include', path)):
            return 'no such header under include/'
        if not path.endswith(HEADER_EXTS):
            return 'not installed (cmake/install.cmake installs *.hpp, *.cuh, *.h only)'
        return None
    if kind == '"':
        return 'a quoted include outside gpuverbs/ (it would resolve against the includer\'s directory)'
    if STD_RE.match(path) or any(r.match(path) for r in EXTERNAL_OK):
        return None
    return 'a library a user of gpuverbs does not have (only the standard library, rdma-core and CUDA)'


def check_tree(root, compiled=None):
    failures = []
    headers = public_headers(root)
    if not headers:
        failures.append('no public header under %s/include/gpuverbs' % root)
    for h in headers:
        with open(os.path.join(root, 'include', h), encoding='utf-8') as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                why = check_include(root, h, m.group(1), m.group(2))
                if why:
                    failures.append('include/%s:%d: #include %s%s%s: %s' %
                                    (h, n, m.group(1), m.group(2), '>' if m.group(1) == '<' else '"', why))
    if compiled is not None:
        with open(compiled, encoding='utf-8') as f:
            listed = {l.strip() for l in f if l.strip()}
        for h in headers:
            if h not in listed:
                failures.append('include/%s: not compiled on its own by gv_header_check (re-run cmake)' % h)
    return failures, len(headers)


def self_test():
    """Each kind of leak in a made-up tree must be reported; a clean tree must pass."""
    cases = {
        'src': '#include "cuda/cuda_rt.hpp"\n',
        'src-angle': '#include <soft/arena.hpp>\n',
        'tools': '#include "cli.hpp"\n',
        'relative': '#include "../../src/core/backend.hpp"\n',
        'missing': '#include "gpuverbs/nope.hpp"\n',
        'other-lib': '#include <boost/optional.hpp>\n',
    }
    bad = 0
    with tempfile.TemporaryDirectory() as t:
        for d in ('include/gpuverbs/device', 'src/cuda', 'src/soft', 'src/core', 'tools'):
            os.makedirs(os.path.join(t, d))
        for f in ('src/cuda/cuda_rt.hpp', 'src/soft/arena.hpp', 'src/core/backend.hpp', 'tools/cli.hpp'):
            open(os.path.join(t, f), 'w').close()
        ok = ('#pragma once\n#include <cstdint>\n#include <time.h>\n#include <infiniband/mlx5dv.h>\n'
              '#include <cuda/atomic>\n#include <cooperative_groups/reduce.h>\n#include "gpuverbs/b.hpp"\n')
        with open(os.path.join(t, 'include/gpuverbs/a.hpp'), 'w') as f:
            f.write(ok)
        open(os.path.join(t, 'include/gpuverbs/b.hpp'), 'w').close()
        failures, _ = check_tree(t)
        if failures:
            print('FAIL: a clean tree was reported: %s' % failures)
            bad += 1
        for name, text in cases.items():
            p = os.path.join(t, 'include/gpuverbs/device/leak.cuh')
            with open(p, 'w') as f:
                f.write(text)
            failures, _ = check_tree(t)
            if len(failures) != 1:
                print('FAIL: case %s (%s): %d failures reported, expected 1: %s' %
                      (name, text.strip(), len(failures), failures))
                bad += 1
            else:
                print('ok: case %s is caught: %s' % (name, failures[0]))
            os.remove(p)
        with open(os.path.join(t, 'list.txt'), 'w') as f:
            f.write('gpuverbs/a.hpp\n')
        failures, _ = check_tree(t, os.path.join(t, 'list.txt'))
        if len(failures) != 1 or 'b.hpp' not in failures[0]:
            print('FAIL: a header missing from the compiled list was not reported: %s' % failures)
            bad += 1
        else:
            print('ok: a header gv_header_check does not compile is caught: %s' % failures[0])
    return 1 if bad else 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != '--compiled'):
        print(__doc__)
        return 2
    failures, n = check_tree(argv[1], argv[3] if len(argv) == 4 else None)
    for f in failures:
        print('FAIL: ' + f)
    if failures:
        return 1
    print('ok: %d public headers include only installed gpuverbs headers, the standard library, '
          'rdma-core and CUDA' % n)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
