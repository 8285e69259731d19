#!/usr/bin/env bash
# Install the built one-folder app for one user (default) or system-wide, with its menu
# entry and icons, so Parley starts from the desktop's application menu.
#
#   packaging/linux/install.sh [PREFIX]      default PREFIX: ~/.local  (sudo for /usr/local)
#   packaging/linux/install.sh --uninstall [PREFIX]
#
# Layout: PREFIX/lib/parley/ (the app folder), PREFIX/bin/parley (a link to it),
# PREFIX/share/applications/parley.desktop, PREFIX/share/icons/hicolor/<size>/apps/parley.png
set -euo pipefail
cd "$(dirname "$0")/../.."

uninstall=0
if [[ "${1:-}" == "--uninstall" ]]; then uninstall=1; shift; fi
prefix="${1:-$HOME/.local}"
sizes="16 22 24 32 48 64 128 256 512"

if (( uninstall )); then
    rm -rf "$prefix/lib/parley" "$prefix/bin/parley" "$prefix/share/applications/parley.desktop"
    for s in $sizes; do rm -f "$prefix/share/icons/hicolor/${s}x${s}/apps/parley.png"; done
    rm -f "$prefix/share/icons/hicolor/scalable/apps/parley.svg"
    echo "install: removed Parley from $prefix"
    exit 0
fi

[[ -x dist/Parley/Parley ]] || { echo "install: dist/Parley/Parley not found; run make package" >&2; exit 2; }
mkdir -p "$prefix/lib" "$prefix/bin" "$prefix/share/applications"
rm -rf "$prefix/lib/parley"
cp -a dist/Parley "$prefix/lib/parley"
ln -sfn "$prefix/lib/parley/Parley" "$prefix/bin/parley"
for s in $sizes; do
    install -Dm644 "resources/icons/parley-$s.png" "$prefix/share/icons/hicolor/${s}x${s}/apps/parley.png"
done
install -Dm644 resources/icons/parley.svg "$prefix/share/icons/hicolor/scalable/apps/parley.svg"
# An absolute Exec: ~/.local/bin is not on every desktop session's PATH.
sed -e "s|^Exec=parley|Exec=$prefix/bin/parley|" -e "s|^TryExec=parley|TryExec=$prefix/bin/parley|" \
    packaging/linux/parley.desktop > "$prefix/share/applications/parley.desktop"
# Refresh the menu and icon caches where the desktop has them (best effort).
if command -v update-desktop-database >/dev/null; then
    update-desktop-database -q "$prefix/share/applications" || true
fi
if command -v gtk-update-icon-cache >/dev/null; then
    gtk-update-icon-cache -q -t "$prefix/share/icons/hicolor" || true
fi
echo "install: Parley installed in $prefix (run: $prefix/bin/parley)"
