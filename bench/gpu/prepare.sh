#!/usr/bin/env bash
# Run on the dev machine (Debian 12, .ci/setup.sh done) before a device call. Fills
# .gpu-carry/ (kept out of git) with what the device machine lacks to build and test the
# whole project: a prefix of Debian packages (runtime and dev) unpacked with
# `apt-get download` + `dpkg -x`, packed as one prefix.tar.xz, plus the demo corpus.
#
#   bash bench/gpu/prepare.sh                    # build .gpu-carry/
#   bash bench/gpu/prepare.sh --check-build DIR  # also: every header, library and CMake
#                                                # file that the build in DIR (a ninja build
#                                                # of this tree on this machine) used from
#                                                # /usr is carried or is the toolchain's
#
# The package set is closed automatically: starting from the packages named below (what
# CMakeLists.txt finds), every ELF file they install is run through ldd, the libraries it
# loads are mapped back to their packages (dpkg -S), and those packages join the set, until
# nothing new appears. Only the toolchain's own runtime (glibc, libstdc++, libgcc, libgomp),
# which the device's g++ brings, is left out. Environment:
#   ZT_GPU_DEB_CACHE   where downloaded .debs are kept between runs (/tmp/zt-gpu-debs)
#   ZT_GPU_CARRY_MAX   size limit in bytes for .gpu-carry/ (60 MiB: the working tree and
#                      the carry travel together under 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/../.."
root_dir=$PWD
die() { echo "prepare.sh: ERROR: $*" >&2; exit 1; }
say() { echo "prepare.sh: $*"; }

check_build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check-build) [ $# -ge 2 ] || die "--check-build needs a build folder"; check_build=$(readlink -f "$2"); shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

for tool in apt-get dpkg dpkg-query ldd xz tar file readelf; do
  command -v "$tool" >/dev/null || die "'$tool' is missing on this machine"
done

carry=.gpu-carry
debs=${ZT_GPU_DEB_CACHE:-/tmp/zt-gpu-debs}
max_bytes=${ZT_GPU_CARRY_MAX:-$((60 * 1024 * 1024))}

# What CMakeLists.txt and tests/CMakeLists.txt find (find_package MPI, HDF5 parallel, Boost
# program_options, OpenMP from the compiler, nlohmann_json, OpenBLAS, GTest), dev and runtime.
seeds=(
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libhdf5-openmpi-dev libhdf5-openmpi-103-1
  libboost-program-options1.74-dev libboost-program-options1.74.0 libboost1.74-dev
  libopenblas-pthread-dev libopenblas0-pthread
  libgtest-dev
  nlohmann-json3-dev
)
# The toolchain's runtime and headers: the device's g++ has its own, and the carried copy
# must never shadow them.
toolchain_re='^(libc6|libc6-dev|libc-dev-bin|libc-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libstdc\+\+6|libstdc\+\+-[0-9]+-dev|libgcc-s1|libgcc-[0-9]+-dev|gcc-[0-9]+-base|libgomp1|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common)$'
# Packages that are ours to carry and always put first on the library path; any other
# package of the closure (curl, TLS, Kerberos, compression...) is a system library that the
# device probably has: run_device.sh uses the device's copy when it has that soname.
own_re='openmpi|pmix|hwloc|libevent|fabric|ucx|ibverbs|rdmacm|psm|efa|libnl-|aec|libsz|hdf5|boost|openblas|gfortran|quadmath|gtest|googletest|nlohmann'

# ---------------------------------------------------------------------------
# 1. The closure: packages, by ldd of every ELF file they install.
# ---------------------------------------------------------------------------
declare -A in_set=() owner=()
# Fills owner[path] for every path given (one dpkg -S for all of them: it is slow per call).
# usrmerge: dpkg may record /lib/... for a file that ldd reports as /usr/lib/..., or back.
resolve_owners() {
  local todo=() path alt pkg line
  for path in "$@"; do
    [ -n "${owner[$path]+x}" ] && continue
    owner[$path]=""
    todo+=("$path")
    case "$path" in /usr/lib/*) todo+=("${path#/usr}") ;; /lib/*) todo+=("/usr$path") ;; esac
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  while IFS= read -r line; do
    # "pkg:arch: /path" or "pkg: /path"; diversions ("diversion by...") are skipped
    case "$line" in diversion*) continue ;; esac
    pkg=${line%%: /*}; pkg=${pkg%%:*}; path=${line#*: }
    case "$pkg" in *,*) pkg=${pkg%%,*} ;; esac
    case "$path" in /usr/lib/*) alt=${path#/usr} ;; /lib/*) alt=/usr$path ;; *) alt=$path ;; esac
    owner[$path]=$pkg
    [ -z "${owner[$alt]:-}" ] && owner[$alt]=$pkg
  done < <(dpkg -S "${todo[@]}" 2>/dev/null || true)
}
# ELF files among the arguments (regular files in bin/lib folders; one `file` for all)
elf_files() {
  [ $# -gt 0 ] || return 0
  printf '%s\0' "$@" | grep -zE '/(s?bin|lib|lib64|libexec)/' | grep -zvE '\.(h|hpp|hxx|ipp|cmake|pc|txt|py|pl|mod|a|la|settings)$' \
    | xargs -0 -r file -N -F $'\t' | awk -F'\t' '$2 ~ /^ ELF / {print $1}'
}
is_elf() { [ -f "$1" ] && [ ! -L "$1" ] && [ -n "$(elf_files "$1")" ]; }

missing_here=()
for p in "${seeds[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing_here+=("$p")
done
[ ${#missing_here[@]} -eq 0 ] || die "not installed here: ${missing_here[*]} (run .ci/setup.sh; the closure is computed from the installed files)"

# The link lines the wrappers give (h5pcc -shlib, mpicc/mpicxx -showme:link) name -lX that
# need the unversioned libX.so of a dev package (libcurl.so, libsz.so, libhdf5_hl.so...):
# add the packages of those links and of what they point to.
wrap_libs=$(
  { printf 'int main(void){return 0;}\n' >"/tmp/zt-h5-$$.c"
    /usr/bin/h5pcc.openmpi -shlib -show "/tmp/zt-h5-$$.c" 2>/dev/null || die "h5pcc.openmpi -shlib -show failed"
    rm -f "/tmp/zt-h5-$$.c"
    /usr/bin/mpicc.openmpi -showme:link; /usr/bin/mpicxx.openmpi -showme:link; } | tr ' ' '\n')
lib_dirs=($(echo "$wrap_libs" | sed -n 's/^-L//p') /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu)
link_files=()
for l in $(echo "$wrap_libs" | sed -n 's/^-l//p' | sort -u); do
  case "$l" in dl|m|pthread|rt|c|util|gcc_s|stdc++|gomp) continue ;; esac  # the toolchain's
  found=""
  for d in "${lib_dirs[@]}"; do
    [ -e "$d/lib$l.so" ] && { found="$d/lib$l.so"; break; }
  done
  [ -n "$found" ] || die "the wrappers link -l$l, but no lib$l.so is installed here"
  link_files+=("$found" "$(readlink -f "$found")")
done
resolve_owners "${link_files[@]}"
link_pkgs=()
for f in "${link_files[@]}"; do
  q=${owner[$f]:-}
  [ -n "$q" ] || continue
  [[ $q =~ $toolchain_re ]] && continue
  [[ " ${seeds[*]} ${link_pkgs[*]} " == *" $q "* ]] || link_pkgs+=("$q")
done
say "the wrappers' -l flags add: ${link_pkgs[*]:-nothing}"

# Breadth first: each round takes the new packages' ELF files, the libraries ldd resolves
# for them, and those libraries' packages.
not_found=()
round=("${seeds[@]}" "${link_pkgs[@]}")
while [ ${#round[@]} -gt 0 ]; do
  for p in "${round[@]}"; do in_set[$p]=1; done
  mapfile -t files < <(for p in "${round[@]}"; do dpkg -L "$p"; done | sort -u)
  mapfile -t elves < <(elf_files "${files[@]}")
  ldd_out=$(for f in "${elves[@]}"; do ldd "$f" 2>/dev/null | sed "s|^|$f |"; done)
  nf=$(echo "$ldd_out" | grep 'not found' || true)
  [ -n "$nf" ] && not_found+=("$nf")
  mapfile -t libs < <(echo "$ldd_out" | awk '$3 == "=>" && $4 ~ /^\// {print $4}' | sort -u)
  mapfile -t reals < <(for l in "${libs[@]}"; do readlink -f "$l"; done | sort -u)
  resolve_owners "${libs[@]}" "${reals[@]}"
  declare -A next=()
  for i in "${!libs[@]}"; do
    l=${libs[$i]}; r=$(readlink -f "$l")
    q=${owner[$r]:-${owner[$l]:-}}
    [ -n "$q" ] || die "$l (loaded by a carried file) belongs to no package"
    [[ $q =~ $toolchain_re ]] && continue
    [ -n "${in_set[$q]+x}" ] || next[$q]=1
  done
  round=("${!next[@]}")
  unset next
done
if [ ${#not_found[@]} -gt 0 ]; then
  printf '%s\n' "${not_found[@]}" | sort -u | head -20 >&2
  die "some carried ELF files load libraries that are not installed here (above)"
fi
pkgs=($(printf '%s\n' "${!in_set[@]}" | sort))
say "closure: ${#pkgs[@]} packages (from ${#seeds[@]} named)"

# ---------------------------------------------------------------------------
# 2. Optional: everything a real build of this tree used from /usr is in the set.
# ---------------------------------------------------------------------------
if [ -n "$check_build" ]; then
  [ -f "$check_build/CMakeCache.txt" ] || die "--check-build $check_build: no CMakeCache.txt there"
  [ -f "$check_build/build.ninja" ] || die "--check-build $check_build: not a ninja build (the header list comes from 'ninja -t deps')"
  used=$(mktemp)
  # Headers every object was compiled with, the CMake package files and libraries the
  # configure step found, and every library the built programs load.
  ninja -C "$check_build" -t deps 2>/dev/null | awk '/^    \/usr\// {print $1}' >>"$used"
  grep -oE '/usr/[^;: "]+' "$check_build/CMakeCache.txt" | grep -v '^/usr/local/cuda' >>"$used" || true
  find "$check_build" -type f -perm -u+x -print0 | xargs -0 -r file -N -F $'\t' \
    | awk -F'\t' '$2 ~ /^ ELF / {print $1}' | while read -r f; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
  done >>"$used"
  bad=()
  nfiles=0
  mapfile -t used_files < <(sort -u "$used" | while read -r f; do [ -f "$f" ] && echo "$f" && readlink -f "$f"; done | sort -u)
  resolve_owners "${used_files[@]}"
  # Only what a build takes from a package: headers, libraries, CMake package files (not the
  # tools, nor CMake's own modules).
  keep_re='(/include/|\.(h|hh|hpp|hxx|ipp|inl|tcc)$|\.so(\.[0-9.]+)?$|\.a$|[Cc]onfig(Version)?\.cmake$|-config(-version)?\.cmake$|Targets(-[a-z]+)?\.cmake$)'
  sed -i -E "/^\/usr\/share\/cmake(-[0-9.]+)?\//d; /^\/usr\/local\//d" "$used"
  grep -E "$keep_re" "$used" >"$used.k" || true; mv "$used.k" "$used"
  for f in $(sort -u "$used"); do
    [ -e "$f" ] || continue
    [ -d "$f" ] && continue
    nfiles=$((nfiles + 1))
    r=$(readlink -f "$f")
    q=${owner[$r]:-${owner[$f]:-}}
    [ -z "$q" ] && continue  # generated, or alternatives links (rebuilt in the prefix)
    [[ $q =~ $toolchain_re ]] && continue
    [ -n "${in_set[$q]+x}" ] || bad+=("$f ($q)")
  done
  rm -f "$used"
  if [ ${#bad[@]} -gt 0 ]; then
    printf '  %s\n' "${bad[@]}" >&2
    die "the build in $check_build used the files above from packages that are not carried: add them to 'seeds' in $0"
  fi
  say "check-build: all $nfiles files from /usr that $check_build used are carried or the toolchain's"
fi

# ---------------------------------------------------------------------------
# 3. Download the exact installed versions and unpack them into one prefix.
# ---------------------------------------------------------------------------
mkdir -p "$debs"
stage=$(mktemp -d /tmp/zt-gpu-stage.XXXXXX)
trap 'rm -rf "$stage"' EXIT
prefix=$stage/prefix
mkdir -p "$prefix"
manifest=$stage/MANIFEST.txt
{ echo "# packages in prefix.tar.xz, made by bench/gpu/prepare.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)";
  echo "# package version category(own|sys)"; } >"$manifest"
for p in "${pkgs[@]}"; do
  ver=$(dpkg-query -W -f='${Version}' "$p")
  arch=$(dpkg-query -W -f='${Architecture}' "$p")
  file_ver=${ver/:/%3a}
  deb="$debs/${p}_${file_ver}_${arch}.deb"
  if [ ! -s "$deb" ]; then
    cached=/var/cache/apt/archives/${p}_${file_ver}_${arch}.deb
    dl=$stage/dl; rm -rf "$dl"; mkdir -p "$dl"
    if [ -s "$cached" ]; then
      cp "$cached" "$deb"
    elif (cd "$dl" && apt-get download -q "$p=$ver" >/dev/null 2>"$stage/apt.err"); then
      mv "$dl"/*.deb "$deb"
    elif (cd "$dl" && apt-get download -q "$p" >/dev/null 2>>"$stage/apt.err"); then
      # The installed build is gone from the archive (a binNMU replaced it): take the
      # archive's build of the same package, and say so.
      got=$(ls "$dl"/*.deb)
      say "WARNING: $p=$ver is no longer in the archive; carrying $(basename "$got") instead"
      deb="$debs/$(basename "$got")"; mv "$got" "$deb"
    else
      cat "$stage/apt.err" >&2; die "cannot download $p ($ver installed here), and it is not in /var/cache/apt/archives"
    fi
  fi
  dpkg -x "$deb" "$prefix"
  cat=sys; [[ $p =~ $own_re ]] && cat=own
  echo "$p $ver $cat" >>"$manifest"
done

# Trim what neither the build nor a run reads.
rm -rf "$prefix"/usr/share/{doc,man,info,lintian,locale,bug} "$prefix"/etc/{ld.so.conf.d,logcheck}
rm -rf "$prefix"/usr/lib/x86_64-linux-gnu/openmpi/lib/*.mod "$prefix"/usr/lib/x86_64-linux-gnu/fortran
find "$prefix" \( -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' ! -name 'libboost_program_options*' \) -delete
find "$prefix" -name '*java*' -prune -exec rm -rf {} +

# Boost's headers are most of the prefix: keep the ones this tree includes and what they
# include in turn (g++ -M over every '#include <boost/...>' of src, include, tests, postproc).
boost_inc=$prefix/usr/include/boost
[ -d "$boost_inc" ] || die "no usr/include/boost in the prefix (libboost1.74-dev)"
grep -rhoE '#include <boost/[^>]+>' src include tests postproc | sort -u >"$stage/boost_used.cpp"
[ -s "$stage/boost_used.cpp" ] || die "no Boost header is included anywhere: is this the ztrain tree?"
g++ -std=c++17 -M -MT boost_used -I"$prefix/usr/include" -x c++ "$stage/boost_used.cpp" \
  | tr ' \\' '\n\n' | grep "^$boost_inc/" | sort -u >"$stage/boost_keep.txt" \
  || die "g++ -M over the Boost headers this tree uses failed"
nkeep=$(wc -l <"$stage/boost_keep.txt")
find "$boost_inc" -type f | sort | comm -23 - "$stage/boost_keep.txt" | xargs -r rm -f
find "$boost_inc" -type d -empty -delete
say "Boost headers: kept the $nkeep that $(wc -l <"$stage/boost_used.cpp") include lines of this tree need"

# Debian's alternatives (mpiexec, mpicc, h5pcc...) are made by maintainer scripts, not by
# the packages: make them here, as links inside the prefix.
for f in "$prefix"/usr/bin/*.openmpi; do
  [ -e "$f" ] || continue
  base=$(basename "$f" .openmpi)
  [ -e "$prefix/usr/bin/$base" ] || ln -s "$(basename "$f")" "$prefix/usr/bin/$base"
done
# Absolute symlinks would point back into the system on the device: make them relative.
while IFS= read -r link; do
  target=$(readlink "$link")
  case "$target" in /*) ;; *) continue ;; esac
  if [ -e "$prefix$target" ] || [ -L "$prefix$target" ]; then
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$prefix$target")" "$link"
  else
    rm -f "$link"  # points outside the carried packages (e.g. /etc/alternatives)
  fi
done < <(find "$prefix" -type l)
# h5pcc hard-codes prefix=/usr: make it relative to where it lies.
h5pcc=$prefix/usr/bin/h5pcc.openmpi
[ -f "$h5pcc" ] || die "h5pcc.openmpi is missing from the prefix (libhdf5-openmpi-dev)"
grep -q '^prefix="/usr"$' "$h5pcc" || die "h5pcc.openmpi has no 'prefix=\"/usr\"' line to relocate"
sed -i 's|^prefix="/usr"$|prefix="$(cd "$(dirname "$(readlink -f "$0")")/.." \&\& pwd)"|' "$h5pcc"

# Every shared library of the prefix by soname: run_device.sh links them into one folder
# on LD_LIBRARY_PATH (the 'own' ones always, the 'sys' ones only where the device lacks
# that soname). Plugins (no soname, loaded by path) stay where they are.
libs=$stage/LIBS.txt
echo "# soname path-in-prefix category package" >"$libs"
glibc_max=0
mapfile -t so_files < <(find "$prefix" -type f -name '*.so*' | sort)
mapfile -t so_files < <(elf_files "${so_files[@]}")
resolve_owners "${so_files[@]#"$prefix"}"
for f in "${so_files[@]}"; do
  v=$(readelf -V "$f" 2>/dev/null | grep -oE 'GLIBC_2\.[0-9]+' | sort -t. -k2 -n | tail -1 | cut -d. -f2 || true)
  [ -n "$v" ] && [ "$v" -gt "$glibc_max" ] && glibc_max=$v
  soname=$(readelf -d "$f" 2>/dev/null | awk '/SONAME/ {gsub(/[][]/, "", $NF); print $NF}')
  [ -n "$soname" ] || continue
  rel=${f#"$prefix"/}
  q=${owner[/$rel]:-}
  cat=sys; [[ $q =~ $own_re ]] && cat=own
  echo "$soname $rel $cat ${q:-?}" >>"$libs"
done
for f in $(elf_files $(find "$prefix/usr/bin" -type f)); do
  v=$(readelf -V "$f" 2>/dev/null | grep -oE 'GLIBC_2\.[0-9]+' | sort -t. -k2 -n | tail -1 | cut -d. -f2 || true)
  [ -n "$v" ] && [ "$v" -gt "$glibc_max" ] && glibc_max=$v
done
echo "glibc 2.$glibc_max" >"$stage/GLIBC.txt"

# The demo corpus (inputs/demo.sh reads the fortunes package's text).
fortunes=/usr/share/games/fortunes
[ -d "$fortunes" ] || die "$fortunes is missing (fortunes, fortunes-min: .ci/setup.sh)"
mkdir -p "$prefix/corpus"
cp -rL "$fortunes" "$prefix/corpus/fortunes"
cp "$manifest" "$libs" "$stage/GLIBC.txt" "$prefix/"

# ---------------------------------------------------------------------------
# 4. Pack.
# ---------------------------------------------------------------------------
raw=$(du -sb "$prefix" | cut -f1)
rm -rf "$carry"
mkdir -p "$carry"
tar -C "$prefix" -cf - . | xz -6 -T2 >"$carry/prefix.tar.xz"
cp "$manifest" "$libs" "$carry/"
(cd "$carry" && sha256sum prefix.tar.xz >prefix.tar.xz.sha256)
packed=$(du -sb "$carry" | cut -f1)
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)

exclude=$(git rev-parse --git-path info/exclude)
if ! git check-ignore -q "$carry/prefix.tar.xz"; then
  mkdir -p "$(dirname "$exclude")"
  echo '/.gpu-carry/' >>"$exclude"
fi
git check-ignore -q "$carry/prefix.tar.xz" || die "$carry is not ignored by git: the device tool carries only ignored paths"

say "$(grep -c ' own$' "$manifest") own + $(grep -c ' sys$' "$manifest") system packages, needs glibc >= 2.$glibc_max"
say "prefix $((raw / 1024 / 1024)) MiB unpacked, .gpu-carry $((packed / 1024)) KiB packed;" \
    "working tree $((tree / 1024)) KiB; together $(((packed + tree) / 1024)) KiB of the 65536 KiB limit"
[ "$packed" -le "$max_bytes" ] || die ".gpu-carry is $packed bytes, over ZT_GPU_CARRY_MAX=$max_bytes"
[ $((packed + tree)) -le $((64 * 1024 * 1024)) ] || die "working tree + carry exceed 64 MiB"
