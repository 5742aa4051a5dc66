# Sourced by the ensure-*.sh scripts: how to run apt-get as root, or why it cannot run.
#
#   root_for_apt NAME "what to do by hand" ...   sets the array SUDO (empty as root, `sudo -n` with
#                                                passwordless sudo), or prints the lines and exits 1
root_for_apt() {
    local name=$1 line
    shift
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$name: apt-get is not available." >&2
    elif [ "$(id -u)" -eq 0 ]; then
        SUDO=()
        return 0
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
        return 0
    else
        echo "$name: installing needs root (or passwordless sudo)." >&2
    fi
    for line in "$@"; do
        echo "$name: $line" >&2
    done
    exit 1
}
