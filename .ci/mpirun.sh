#!/usr/bin/env bash
# Kept for scripts written against it: the launcher is tools/ztrun (installed as bin/ztrun).
exec bash "$(dirname "$0")/../tools/ztrun" "$@"
