#!/bin/sh
# Regenerates the *_pb2.py/.pyi beside this script from the vendored .proto files (see README.md).
# protoc names the generated imports after the proto import paths, so the files are compiled from a
# tree where they sit under prexid/service/decode/prompb/, the installed package's name.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-"$here/../../../.venv/bin/python"}
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/prexid/service/decode/prompb"
cp "$here"/types.proto "$here"/remote.proto "$tree/prexid/service/decode/prompb/"
(cd "$tree" && "$python" -m grpc_tools.protoc -I . --python_out=. --pyi_out=. \
  prexid/service/decode/prompb/types.proto prexid/service/decode/prompb/remote.proto)
cp "$tree"/prexid/service/decode/prompb/*_pb2.py "$tree"/prexid/service/decode/prompb/*_pb2.pyi "$here/"
