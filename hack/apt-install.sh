# Sourced by the install scripts: apt_install PKG... installs the Debian packages
# that are missing (nothing, and no `apt-get update`, when all are there).
# Another apt run (a parallel install script) may hold the lock: wait for it.
apt_install() {
  local sudo=() missing=() pkg
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}
