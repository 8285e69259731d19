; Inno Setup script: a per-user installer for the one-folder build in dist\Parley.
;   iscc /DVersion=0.1.0 packaging\windows\parley.iss      -> dist\Parley-0.1.0-setup.exe
; `python packaging\build.py --installer` runs this with the version from pyproject.toml;
; the windows job of .github/workflows/ci.yml does (not run yet: see packaging/README.md).
#ifndef Version
  #define Version "0.1.0"
#endif

[Setup]
AppId={{8C1F6E4B-5A2D-4C8E-9B7A-3E0D2F6A1B94}
AppName=Parley
AppVersion={#Version}
AppPublisher=Parley
DefaultDirName={localappdata}\Programs\Parley
DefaultGroupName=Parley
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
OutputDir=..\..\dist
OutputBaseFilename=Parley-{#Version}-setup
SetupIconFile=..\..\resources\icons\parley.ico
UninstallDisplayIcon={app}\Parley.exe
Compression=lzma2/max
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
WizardStyle=modern

[Files]
Source: "..\..\dist\Parley\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Parley"; Filename: "{app}\Parley.exe"
Name: "{autodesktop}\Parley"; Filename: "{app}\Parley.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\Parley.exe"; Description: "Start Parley"; Flags: nowait postinstall skipifsilent
