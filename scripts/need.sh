# need.sh — sourced by bench/run.sh and tests/run.sh: installs the Debian
# packages that are missing (with apt-get when run as root), or says which.
# Usage: need_packages "<command-or-pkgconfig-name>:<debian package>" ...
#   "cmake:cmake"      the command cmake, else install cmake
#   "pc:criterion:libcriterion-dev"   the pkg-config module, else the package
#   "py:ensurepip:python3-venv"       the python3 module, else the package
#   "file:/path/to/lib.a:libfoo-dev"  the file, else the package
need_packages() {
  local missing=() item name pkg
  for item in "$@"; do
    if [ "${item%%:*}" = pc ]; then
      item=${item#pc:}
      name=${item%%:*}
      pkg=${item#*:}
      pkg-config --exists "$name" 2>/dev/null || missing+=("$pkg")
    elif [ "${item%%:*}" = file ]; then
      item=${item#file:}
      name=${item%:*}
      pkg=${item##*:}
      [ -e "$name" ] || missing+=("$pkg")
    elif [ "${item%%:*}" = py ]; then
      item=${item#py:}
      name=${item%%:*}
      pkg=${item#*:}
      python3 -c "import $name" 2>/dev/null || missing+=("$pkg")
    else
      name=${item%%:*}
      pkg=${item#*:}
      command -v "$name" >/dev/null || missing+=("$pkg")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ]; then
    echo "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "missing ${missing[*]}; install them (e.g. sudo apt-get install ${missing[*]})" >&2
    return 1
  fi
}
