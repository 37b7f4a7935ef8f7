# Sourced by run and minimize: the committed corpus of a target is
# corpus/<target>.tar.xz; unpack puts it in unpacked/<target> (not
# committed), pack writes a directory of inputs back.
unpack() {
    rm -rf "unpacked/$1"
    mkdir -p unpacked
    if [ -f "corpus/$1.tar.xz" ]; then
        tar -xJf "corpus/$1.tar.xz" -C unpacked
    else
        mkdir -p "unpacked/$1"
    fi
}

# pack TARGET DIR: DIR's files become corpus/TARGET.tar.xz, byte for byte
# the same archive for the same inputs; the old one is replaced only once
# the new one is whole.
pack() {
    local tmp
    tmp=$(mktemp -d)
    mkdir -p "$tmp/$1" corpus
    cp -r "$2"/. "$tmp/$1/"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        -C "$tmp" -cf - "$1" | xz -9e -T1 >"corpus/$1.tar.xz.tmp"
    mv "corpus/$1.tar.xz.tmp" "corpus/$1.tar.xz"
    rm -rf "$tmp"
}
