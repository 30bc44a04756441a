#!/usr/bin/env bash
# Kept for scripts written against it: the launcher is src/app/ztrun (installed as bin/ztrun).
exec bash "$(dirname "$0")/../src/app/ztrun" "$@"
