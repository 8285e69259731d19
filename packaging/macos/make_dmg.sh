#!/usr/bin/env bash
# Check Parley.app's signature, wrap it in a .dmg, and notarize it.   (macOS only)
#
#   PARLEY_CODESIGN_IDENTITY="Developer ID Application: Name (TEAMID)" make package
#   PARLEY_CODESIGN_IDENTITY=... PARLEY_NOTARY_PROFILE=parley-notary packaging/macos/make_dmg.sh
#
# Signing happens during the build: packaging/parley.spec hands PARLEY_CODESIGN_IDENTITY and
# packaging/macos/entitlements.plist to PyInstaller, which signs every library, then the
# bundle, with the hardened runtime (ad hoc when the identity is unset: such an app runs on
# the Mac that built it; Gatekeeper blocks it elsewhere).
#
# Environment:
#   PARLEY_CODESIGN_IDENTITY  the identity the app was built with; also signs the .dmg
#   PARLEY_NOTARY_PROFILE     a `xcrun notarytool store-credentials` profile; unset: no
#                             notarization
# Writes dist/Parley-<version>.dmg holding Parley.app and a link to /Applications.
set -euo pipefail
cd "$(dirname "$0")/../.."

app="dist/Parley.app"
[[ "$(uname)" == Darwin ]] || { echo "make_dmg: macOS only" >&2; exit 2; }
[[ -d "$app" ]] || { echo "make_dmg: $app not found; run make package first" >&2; exit 2; }
version="$(/usr/libexec/PlistBuddy -c 'Print :CFBundleShortVersionString' "$app/Contents/Info.plist")"
dmg="dist/Parley-${version}.dmg"

# Without NSMicrophoneUsageDescription macOS kills the app the moment it opens the microphone.
mic="$(/usr/libexec/PlistBuddy -c 'Print :NSMicrophoneUsageDescription' "$app/Contents/Info.plist" 2>/dev/null || true)"
[[ -n "$mic" ]] || { echo "make_dmg: $app/Contents/Info.plist has no NSMicrophoneUsageDescription" >&2; exit 2; }
echo "make_dmg: microphone usage string: $mic"

codesign --verify --deep --strict --verbose=2 "$app"
# Ad hoc (codesign -s -, PyInstaller's default) or the identity: say which, for the CI log.
codesign -dv "$app" 2>&1 | grep -E '^(Identifier|Signature|Authority|TeamIdentifier)=' | sed 's/^/make_dmg:   /'
if [[ -n "${PARLEY_CODESIGN_IDENTITY:-}" ]]; then
    if ! codesign -dvv "$app" 2>&1 | grep -qF "Authority=${PARLEY_CODESIGN_IDENTITY}"; then
        echo "make_dmg: $app is not signed by $PARLEY_CODESIGN_IDENTITY;" \
             "rebuild with PARLEY_CODESIGN_IDENTITY set (make package)" >&2
        exit 2
    fi
    # The hardened runtime must carry the microphone entitlement, or capture is denied.
    codesign -d --entitlements - --xml "$app" 2>/dev/null | grep -q "com.apple.security.device.audio-input" || {
        echo "make_dmg: $app lacks the audio-input entitlement" >&2; exit 2; }
else
    codesign -dv "$app" 2>&1 | grep -qx 'Signature=adhoc' || {
        echo "make_dmg: $app is not ad-hoc signed, and PARLEY_CODESIGN_IDENTITY is not set" >&2; exit 2; }
    echo "make_dmg: PARLEY_CODESIGN_IDENTITY not set: ad-hoc signed, for this Mac only" >&2
fi

staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
cp -R "$app" "$staging/"
ln -s /Applications "$staging/Applications"
rm -f "$dmg"
hdiutil create -volname "Parley" -srcfolder "$staging" -ov -format UDZO "$dmg"

if [[ -n "${PARLEY_CODESIGN_IDENTITY:-}" ]]; then
    codesign --force --timestamp --sign "$PARLEY_CODESIGN_IDENTITY" "$dmg"
fi
if [[ -n "${PARLEY_NOTARY_PROFILE:-}" ]]; then
    xcrun notarytool submit "$dmg" --keychain-profile "$PARLEY_NOTARY_PROFILE" --wait
    xcrun stapler staple "$dmg"
    spctl --assess --type open --context context:primary-signature --verbose "$dmg"
fi
echo "make_dmg: wrote $dmg ($(du -sh "$dmg" | cut -f1))"
