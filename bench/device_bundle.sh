#!/bin/bash
# What a device machine (Python 3.12 with PyTorch, no package registry, no PostgreSQL)
# needs for bench/device_checks.sh, made here: cp312 wheels of HAL's dependencies that
# its image lacks, at the versions .venv has (.whl/), and Debian's PostgreSQL 15 with the
# libraries it links beyond glibc (.pgb/pg15.tar.xz, ~20 MB). Both folders are ignored
# through .git/info/exclude; the device tool carries them: carry [".whl", ".pgb"].
#   bash bench/device_bundle.sh        (repo root, after `make venv`; needs postgresql-15)
set -eu
gd=$(git rev-parse --git-common-dir); mkdir -p "$gd/info"
for p in /.whl/ /.pgb/; do grep -qxF $p "$gd/info/exclude" 2>/dev/null || echo $p >> "$gd/info/exclude"; done
# HAL's dependencies missing from the device image (its package list: the device tool's KINDS.md)
MISSING="annotated-types cffi cryptography cronsim fastapi googleapis-common-protos greenlet
hiredis httptools lightgbm opentelemetry-api opentelemetry-exporter-http-transport
opentelemetry-exporter-otlp-common opentelemetry-exporter-otlp-proto-common
opentelemetry-exporter-otlp-proto-http opentelemetry-proto opentelemetry-sdk
opentelemetry-semantic-conventions psycopg psycopg-binary pycparser pydantic pydantic-core
pyroute2 python-dotenv redis sniffio sqlalchemy starlette structlog typing-inspection uvicorn
watchfiles websockets pytest-rerunfailures anyio typing-extensions importlib-metadata"
pins=$(for p in $MISSING; do .venv/bin/python -c "import importlib.metadata as m; print('$p==' + m.version('$p'))"; done)
rm -rf .whl; mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $pins
.venv/bin/pip wheel -q --no-deps "python-hostlist==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("python-hostlist"))')" -w .whl
# PostgreSQL: the server's programs, the modules initdb and a server load, share/, and
# every library they link but glibc's and the compiler's own (the device has newer ones)
src=/usr/lib/postgresql/15; tmp=$(mktemp -d); chmod 755 $tmp  # (the archive's root: nobody runs it)
mkdir -p $tmp$src/bin $tmp$src/lib $tmp/usr/share/postgresql $tmp/libs $tmp/zoneinfo
cp $src/bin/{postgres,initdb,pg_ctl} $tmp$src/bin/
cp $src/lib/{plpgsql.so,dict_snowball.so,libpqwalreceiver.so,pgoutput.so} $tmp$src/lib/
cp -r /usr/share/postgresql/15 $tmp/usr/share/postgresql/
for l in $(ldd $tmp$src/bin/* $tmp$src/lib/*.so | awk '/=>/ {print $3}' | sort -u); do
  case $(basename $l) in libc.so*|libm.so*|libresolv.so*|libgcc_s.so*|libstdc++.so*) ;; *) cp -L $l $tmp/libs/ ;; esac
done
cp -r /usr/share/zoneinfo/UTC /usr/share/zoneinfo/Etc $tmp/zoneinfo/
mkdir -p .pgb; tar cJf .pgb/pg15.tar.xz -C $tmp .; rm -rf $tmp
du -sh .whl .pgb
