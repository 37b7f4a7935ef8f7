# Sourced by the set-up scripts: installs Debian packages that are missing.
# Usage: need_packages pkg...
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "ptscope: installing ${missing[*]}" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# Build tools: cc/c++ for the test programs, cmake and libclang for libipt.
BUILD_PACKAGES=(build-essential cmake libclang-dev pkg-config)
# Runtime libraries of the GUI (winit on X11/Wayland, OpenGL/Vulkan via Mesa).
GUI_PACKAGES=(libx11-6 libxcursor1 libxrandr2 libxi6 libxkbcommon-x11-0 libgl1 libegl1 libgl1-mesa-dri mesa-vulkan-drivers)
# perf decodes our files in the tests, as a second judge; Xvfb runs the
# real window for the screenshot test; xz unpacks the fuzzing corpus the
# tests replay; desktop-file-utils and shared-mime-info judge what
# scripts/install writes, and unshare (util-linux) hides the checkout from
# the installed binary; the debuginfod client's tests start a real
# debuginfod server on loopback. libc6-dbg holds the symbols of the
# stripped libc and loader (/usr/lib/debug/.build-id), which perf and
# ptscope name them by. python3-venv holds the export tests' readers
# (tests/requirements.txt: Perfetto's schema, an FXT parser). qemu-user
# runs programs for the QEMU capture backend, whose tests need it.
TEST_PACKAGES=(qemu-user linux-perf binutils python3-venv xvfb xauth xz-utils desktop-file-utils shared-mime-info util-linux debuginfod libc6-dbg)
