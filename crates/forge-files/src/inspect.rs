//! Inspection before acceptance: the name, the type the bytes are (magic numbers first, then a
//! look at text), whether it agrees with the declared type and the extension, and whether the
//! file carries active content (scripts, event handlers, macros) or is an archive. The
//! [`Policy`] decides what is refused and what is let through with a [`Finding`].

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use forge_core::scope::TenantId;
use serde::{Deserialize, Serialize};

use crate::model::Finding;

/// The bytes of a file's start that type detection reads.
pub const HEAD_BYTES: usize = 8 * 1024;

/// The longest name kept, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Why an upload was refused. Every variant is safe to show the uploader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// The file is larger than allowed.
    #[error("the file is larger than the {limit} bytes allowed")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The name is not a plain file name.
    #[error(
        "the file name {0:?} is not a plain file name (no directories, no control characters, at most 255 bytes)"
    )]
    BadName(String),
    /// The type is not on the allowlist.
    #[error("files of type {0} are not accepted")]
    TypeNotAllowed(String),
    /// The declared type or extension disagrees with the bytes.
    #[error("the file claims to be {claimed} but its content is {detected}")]
    TypeMismatch {
        /// What was claimed.
        claimed: String,
        /// What it is.
        detected: String,
    },
    /// Scripts, event handlers or macros, which the policy refuses.
    #[error("the file carries active content ({0})")]
    ActiveContent(String),
    /// An archive, which the policy refuses.
    #[error("archives are not accepted")]
    Archive,
    /// The malware scanner found something.
    #[error("the malware scanner found {0}")]
    Infected(String),
    /// The malware scanner could not be asked; nothing is accepted unscanned.
    #[error("the file could not be scanned for malware; try again later")]
    ScannerUnavailable,
    /// The upload took too long or stalled.
    #[error("the upload was too slow")]
    TooSlow,
    /// The access label is empty, longer than 64 characters, or has control characters.
    #[error("the access label {0:?} is not 1 to 64 characters without control characters")]
    BadLabel(String),
}

impl Refusal {
    /// A stable code for clients and the audit trail.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Empty => "empty_file",
            Refusal::TooLarge { .. } => "file_too_large",
            Refusal::BadName(_) => "bad_file_name",
            Refusal::TypeNotAllowed(_) => "type_not_allowed",
            Refusal::TypeMismatch { .. } => "type_mismatch",
            Refusal::ActiveContent(_) => "active_content",
            Refusal::Archive => "archive",
            Refusal::Infected(_) => "malware",
            Refusal::ScannerUnavailable => "scanner_unavailable",
            Refusal::TooSlow => "upload_too_slow",
            Refusal::BadLabel(_) => "bad_label",
        }
    }
}

/// What the policy does with a kind of finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Refuse the upload.
    Refuse,
    /// Accept it, recording the finding (for a type mismatch: keep the type the bytes are).
    Flag,
}

/// What uploads are accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The largest file accepted, in bytes.
    pub max_bytes: u64,
    /// Larger or smaller limits for some tenants.
    pub tenant_max_bytes: HashMap<TenantId, u64>,
    /// Media types accepted: exact (`application/pdf`) or a family (`text/*`).
    pub allowed: Vec<String>,
    /// A declared type or extension the bytes contradict.
    pub on_mismatch: Action,
    /// Scripts, event handlers, macros.
    pub on_active_content: Action,
    /// Archives.
    pub on_archive: Action,
    /// The longest a file reference may last, at issue and when it is used: a reference whose
    /// expiry lies further ahead than this is refused even when its signature is good (it was
    /// not issued under this policy).
    pub max_reference_ttl: std::time::Duration,
}

impl Default for Policy {
    /// 25 MiB; text, Markdown, CSV, JSON, HTML, PDF, common images and Office documents;
    /// mismatches, active content and archives refused.
    fn default() -> Self {
        Self {
            max_bytes: 25 * 1024 * 1024,
            tenant_max_bytes: HashMap::new(),
            allowed: [
                "text/plain",
                "text/markdown",
                "text/csv",
                "text/html",
                "application/json",
                "application/pdf",
                "image/png",
                "image/jpeg",
                "image/gif",
                "image/webp",
                "image/svg+xml",
                DOCX,
                XLSX,
                PPTX,
            ]
            .map(String::from)
            .to_vec(),
            on_mismatch: Action::Refuse,
            on_active_content: Action::Refuse,
            on_archive: Action::Refuse,
            max_reference_ttl: crate::service::MAX_REFERENCE_TTL,
        }
    }
}

impl Policy {
    /// The size limit for `tenant`.
    pub fn limit(&self, tenant: &TenantId) -> u64 {
        self.tenant_max_bytes
            .get(tenant)
            .copied()
            .unwrap_or(self.max_bytes)
    }

    /// Whether `media_type` is on the allowlist.
    pub fn allows(&self, media_type: &str) -> bool {
        self.allowed.iter().any(|a| match a.strip_suffix("/*") {
            Some(family) => media_type.split_once('/').is_some_and(|(f, _)| f == family),
            None => a == media_type,
        })
    }
}

const DOCX: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";
const XLSX: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";
const PPTX: &str = "application/vnd.openxmlformats-officedocument.presentationml.presentation";
const OCTET: &str = "application/octet-stream";

/// `raw` as a plain file name, or why it is not one: no directory part (`/`, `\`), not `.` or
/// `..`, no control characters, no invisible or reordering ones (a bidirectional override makes
/// `report\u{202E}fdp.txt` show as `reporttxt.pdf`), 1 to [`MAX_NAME_BYTES`] bytes. The refusal
/// quotes at most 64 of the name's visible characters.
pub fn file_name(raw: &str) -> Result<String, Refusal> {
    let hidden = |c: char| c.is_control() || forge_core::text::invisible(c);
    let bad = raw.is_empty()
        || raw.len() > MAX_NAME_BYTES
        || raw == "."
        || raw == ".."
        || raw.contains(['/', '\\'])
        || raw.chars().any(hidden)
        || raw.trim() != raw;
    if bad {
        Err(Refusal::BadName(
            raw.chars().filter(|c| !hidden(*c)).take(64).collect(),
        ))
    } else {
        Ok(raw.to_owned())
    }
}

/// The type a file name's extension implies, for the types Forge knows.
pub fn extension_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "txt" | "text" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "docx" => DOCX,
        "xlsx" => XLSX,
        "pptx" => PPTX,
        "docm" | "xlsm" | "pptm" => "application/vnd.ms-office.macroenabled",
        "doc" | "xls" | "ppt" => "application/x-ole-storage",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "7z" => "application/x-7z-compressed",
        "rar" => "application/vnd.rar",
        "exe" | "dll" => "application/vnd.microsoft.portable-executable",
        _ => return None,
    })
}

/// Whether a media type is text Forge can read and index.
pub fn is_textual(media_type: &str) -> bool {
    media_type.starts_with("text/") || media_type == "application/json"
}

/// The type of a file from its first bytes (`head`, at most [`HEAD_BYTES`]).
pub fn detect(head: &[u8]) -> &'static str {
    // Text is decided below, by Forge's own reading (infer names HTML, XML and scripts too).
    if let Some(kind) = infer::get(head).filter(|k| k.matcher_type() != infer::MatcherType::Text) {
        let found = kind.mime_type();
        return match found {
            "application/zip" => zip_kind(head),
            "application/x-ole-storage"
            | "application/msword"
            | "application/vnd.ms-excel"
            | "application/vnd.ms-powerpoint" => "application/x-ole-storage",
            // Anything else infer knows, by its canonical name when Forge has one.
            other => known(other),
        };
    }
    if !looks_like_text(head) {
        return OCTET;
    }
    let start = String::from_utf8_lossy(&head[..head.len().min(1024)]).to_ascii_lowercase();
    let start = start.trim_start_matches('\u{feff}').trim_start();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        return "text/html";
    }
    if start.starts_with("<svg") || (start.starts_with("<?xml") && start.contains("<svg")) {
        return "image/svg+xml";
    }
    "text/plain"
}

/// An Office Open XML document is a zip whose first entries name its part; anything else in a
/// zip is an archive.
fn zip_kind(head: &[u8]) -> &'static str {
    let window = String::from_utf8_lossy(head);
    if window.contains("word/") {
        DOCX
    } else if window.contains("xl/") {
        XLSX
    } else if window.contains("ppt/") {
        PPTX
    } else {
        "application/zip"
    }
}

fn known(mime: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "application/pdf",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "application/gzip",
        "application/x-tar",
        "application/x-7z-compressed",
        "application/vnd.rar",
        "application/x-bzip2",
        "application/x-xz",
        "application/vnd.microsoft.portable-executable",
        "application/x-executable",
    ];
    KNOWN.iter().copied().find(|k| *k == mime).unwrap_or(OCTET)
}

/// UTF-8 (a character cut at the end of the window allowed) without NUL or other binary
/// control characters.
fn looks_like_text(head: &[u8]) -> bool {
    let valid = match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() - e.valid_up_to() < 4,
    };
    valid
        && !head
            .iter()
            .any(|b| *b == 0 || (*b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x0c)))
}

/// A declared type without its parameters, lower-cased.
fn essence(claimed: &str) -> String {
    claimed
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether the bytes' type `detected` is what `claimed` (a declared type, or an extension's)
/// says: the same, or text the claim names more precisely (Markdown, CSV, JSON — and HTML or
/// SVG, which are then inspected as markup), or an uploader who declared only "binary".
pub fn agrees(claimed: &str, detected: &str) -> bool {
    let claimed = essence(claimed);
    claimed == detected
        || claimed == OCTET
        || (detected == "text/plain" && (is_textual(&claimed) || claimed == "image/svg+xml"))
        || (detected == "image/jpeg" && claimed == "image/jpg")
}

/// Archive types, whose members are not inspected.
fn is_archive(media_type: &str) -> bool {
    matches!(
        media_type,
        "application/zip"
            | "application/gzip"
            | "application/x-tar"
            | "application/x-7z-compressed"
            | "application/vnd.rar"
            | "application/x-bzip2"
            | "application/x-xz"
    )
}

/// Active content in the file at `path` of type `media_type`: for HTML, SVG and Markdown (which
/// may carry raw HTML), a script, an event-handler attribute or a `javascript:` URL; for PDF, a
/// JavaScript or launch action (names read with their `#xx` escapes decoded); for Office
/// documents, macros (a `vbaProject.bin` part, or a legacy binary document, which cannot be
/// shown to hold none) and embedded executables (a part named like a program, or whose bytes
/// start like one).
pub fn active_content(path: &Path, media_type: &str) -> std::io::Result<Option<String>> {
    match media_type {
        "text/html" | "image/svg+xml" | "text/markdown" => {
            let bytes = std::fs::read(path)?;
            Ok(markup_activity(
                &String::from_utf8_lossy(&bytes).to_ascii_lowercase(),
            ))
        }
        "application/pdf" => Ok(pdf_activity(&std::fs::read(path)?)),
        DOCX | XLSX | PPTX => {
            let file = std::fs::File::open(path)?;
            let Ok(mut archive) = zip::ZipArchive::new(file) else {
                return Ok(Some("an unreadable document".into()));
            };
            Ok(office_activity(&mut archive))
        }
        "application/x-ole-storage" | "application/vnd.ms-office.macroenabled" => {
            Ok(Some("macros".into()))
        }
        _ => Ok(None),
    }
}

/// Macros or an embedded executable in an Office Open XML document.
fn office_activity<R: Read + std::io::Seek>(archive: &mut zip::ZipArchive<R>) -> Option<String> {
    const PROGRAMS: &[&str] = &[
        ".exe", ".dll", ".scr", ".com", ".bat", ".cmd", ".ps1", ".vbs", ".vbe", ".js", ".jse",
        ".wsf", ".hta", ".msi", ".jar", ".lnk", ".sh", ".elf",
    ];
    for i in 0..archive.len() {
        // An entry that cannot be read cannot be shown to hold no macros or program.
        let Ok(mut entry) = archive.by_index(i) else {
            return Some("an unreadable part".into());
        };
        let Ok(name) = entry.name().map(|n| n.to_ascii_lowercase()) else {
            return Some("an unreadable part".into());
        };
        if name.ends_with("vbaproject.bin") {
            return Some("macros".into());
        }
        if PROGRAMS.iter().any(|p| name.ends_with(p)) {
            return Some("an embedded executable".into());
        }
        let mut magic = [0u8; 4];
        let read = entry.read(&mut magic).unwrap_or(0);
        if executable_magic(&magic[..read]) {
            return Some("an embedded executable".into());
        }
    }
    None
}

/// Whether `head` starts like a program: a Windows (`MZ`), ELF or Mach-O executable.
fn executable_magic(head: &[u8]) -> bool {
    head.starts_with(b"MZ")
        || head.starts_with(b"\x7fELF")
        || [
            [0xfe, 0xed, 0xfa, 0xce],
            [0xfe, 0xed, 0xfa, 0xcf],
            [0xce, 0xfa, 0xed, 0xfe],
            [0xcf, 0xfa, 0xed, 0xfe],
        ]
        .iter()
        .any(|m| head.starts_with(m))
}

/// A JavaScript or launch action in a PDF: its name objects are read with `#xx` escapes
/// decoded, so `/J#61vaScript` is `/JavaScript`. Names inside compressed object streams are not
/// seen (they would need the stream decompressed).
fn pdf_activity(bytes: &[u8]) -> Option<String> {
    let delimiter = |b: u8| b.is_ascii_whitespace() || b"/[]<>(){}%".contains(&b) || b == 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'/' {
            i += 1;
            continue;
        }
        let mut name = Vec::new();
        let mut j = i + 1;
        while j < bytes.len() && !delimiter(bytes[j]) {
            let decoded = (bytes[j] == b'#')
                .then(|| bytes.get(j + 1..j + 3))
                .flatten()
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok());
            match decoded {
                Some(b) => {
                    name.push(b);
                    j += 3;
                }
                None => {
                    name.push(bytes[j]);
                    j += 1;
                }
            }
        }
        match name.as_slice() {
            b"JavaScript" | b"JS" => return Some("PDF JavaScript".into()),
            b"Launch" => return Some("PDF launch action".into()),
            _ => {}
        }
        i = j.max(i + 1);
    }
    None
}

fn markup_activity(lower: &str) -> Option<String> {
    if lower.contains("<script") {
        return Some("script".into());
    }
    if lower.contains("javascript:") {
        return Some("javascript: URL".into());
    }
    // An attribute `on…=` inside a tag: a space or slash, `on`, letters, optional spaces, `=`.
    let bytes = lower.as_bytes();
    let mut in_tag = false;
    for i in 0..bytes.len() {
        match bytes[i] {
            b'<' => in_tag = true,
            b'>' => in_tag = false,
            b'o' if in_tag
                && i > 0
                && matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'\r' | b'/')
                && bytes.get(i + 1) == Some(&b'n') =>
            {
                let name_end = bytes[i + 2..]
                    .iter()
                    .position(|b| !b.is_ascii_lowercase())
                    .map_or(bytes.len(), |p| i + 2 + p);
                let rest = lower[name_end..].trim_start();
                if name_end > i + 2 && rest.starts_with('=') {
                    return Some("event handler".into());
                }
            }
            _ => {}
        }
    }
    None
}

/// The decision on an inspected file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The media type kept.
    pub media_type: String,
    /// What the policy let through.
    pub findings: Vec<Finding>,
}

/// Decides on the file at `path` (its first bytes `head`), named `name`, declared as
/// `declared`: the type is the bytes'; a declared type or extension that disagrees, active
/// content and archives are refused or flagged as `policy` says; the type must be allowed.
pub fn decide(
    policy: &Policy,
    path: &Path,
    head: &[u8],
    name: &str,
    declared: Option<&str>,
) -> Result<Decision, Refusal> {
    let detected = detect(head);
    let mut findings = Vec::new();
    let mut claims: Vec<String> = declared
        .map(essence)
        .into_iter()
        .chain(extension_type(name).map(String::from))
        .collect();
    claims.dedup();
    for claimed in claims {
        if !agrees(&claimed, detected) {
            if policy.on_mismatch == Action::Refuse {
                return Err(Refusal::TypeMismatch {
                    claimed,
                    detected: detected.into(),
                });
            }
            findings.push(Finding::TypeMismatch {
                claimed,
                detected: detected.into(),
            });
        }
    }
    // Text the declaration names more precisely keeps the more precise name (HTML and SVG
    // declared on bytes that look like plain text are inspected, and served, as markup).
    let media_type = match declared.or(extension_type(name)) {
        Some(claim)
            if detected == "text/plain" && agrees(claim, detected) && essence(claim) != OCTET =>
        {
            essence(claim)
        }
        _ => detected.to_owned(),
    };
    if is_archive(&media_type) {
        if policy.on_archive == Action::Refuse {
            return Err(Refusal::Archive);
        }
        findings.push(Finding::Archive);
    }
    // What is refused for activity is decided before the allowlist, so the reason given is the
    // one that matters (a macro-laden document is refused for its macros).
    let activity = active_content(path, &media_type)
        .map_err(|_| Refusal::ActiveContent("unreadable".into()))?;
    if let Some(what) = activity {
        if policy.on_active_content == Action::Refuse {
            return Err(Refusal::ActiveContent(what));
        }
        findings.push(Finding::ActiveContent { what });
    }
    if !policy.allows(&media_type) {
        return Err(Refusal::TypeNotAllowed(media_type));
    }
    Ok(Decision {
        media_type,
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::text::strategy::{unicode, unicode_runs};
    use proptest::prelude::*;

    proptest! {
        /// Any Unicode: a name is accepted whole or refused, never cut; an accepted one has no
        /// control, invisible or reordering character; a refusal quotes none of those, and at
        /// most 64 characters.
        #[test]
        fn any_unicode_name_is_accepted_whole_or_refused(
            raw in prop_oneof![unicode(300), unicode_runs(300)],
        ) {
            match file_name(&raw) {
                Ok(name) => {
                    prop_assert_eq!(&name, &raw);
                    prop_assert!(name.len() <= MAX_NAME_BYTES);
                    prop_assert!(!name.chars().any(|c| c.is_control() || forge_core::text::invisible(c)));
                }
                Err(Refusal::BadName(quoted)) => {
                    prop_assert!(quoted.chars().count() <= 64);
                    prop_assert!(!quoted.chars().any(|c| c.is_control() || forge_core::text::invisible(c)));
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }
    }

    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
    const PDF: &[u8] = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj";

    #[test]
    fn names_are_plain_file_names() {
        assert_eq!(file_name("contract v2.pdf").unwrap(), "contract v2.pdf");
        for bad in [
            "",
            ".",
            "..",
            "../../etc/passwd",
            "a/b.txt",
            "..\\win.ini",
            "bell\u{7}.txt",
            "report\u{202E}fdp.txt",
            "inv\u{200B}oice.pdf",
            "\u{2067}exe.txt",
            " padded.txt",
            &"x".repeat(256),
        ] {
            assert!(
                matches!(file_name(bad), Err(Refusal::BadName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn types_come_from_the_bytes() {
        assert_eq!(detect(PNG), "image/png");
        assert_eq!(detect(PDF), "application/pdf");
        assert_eq!(detect(b"Plain words.\n"), "text/plain");
        assert_eq!(detect("Grüße, ".as_bytes()), "text/plain");
        // A window that ends inside a character is still text.
        assert_eq!(detect(&"é".as_bytes()[..1]), "text/plain");
        assert_eq!(detect(b"<!DOCTYPE html><p>x"), "text/html");
        assert_eq!(
            detect(b"<?xml version=\"1.0\"?>\n<svg xmlns=\"x\"/>"),
            "image/svg+xml"
        );
        assert_eq!(detect(b"\x00\x01\x02binary"), OCTET);
        assert_eq!(
            detect(b"MZ\x90\x00\x03\x00\x00\x00"),
            "application/vnd.microsoft.portable-executable"
        );
    }

    #[test]
    fn claims_agree_only_with_what_the_bytes_can_be() {
        assert!(agrees("application/pdf", "application/pdf"));
        assert!(agrees("text/markdown; charset=utf-8", "text/plain"));
        assert!(agrees("application/json", "text/plain"));
        assert!(agrees("application/octet-stream", "image/png"));
        assert!(!agrees("image/png", "text/plain"));
        assert!(!agrees("text/plain", "application/pdf"));
        assert!(agrees("text/html", "text/plain"), "then inspected as HTML");
        assert!(
            !agrees("text/plain", "text/html"),
            "HTML bytes are not plain text"
        );
    }

    #[test]
    fn markup_activity_is_found() {
        assert_eq!(
            markup_activity("<p onclick = \"x()\">"),
            Some("event handler".into())
        );
        assert_eq!(
            markup_activity("<svg><script>x</script>"),
            Some("script".into())
        );
        assert_eq!(
            markup_activity("<a href=\"javascript:x\">"),
            Some("javascript: URL".into())
        );
        assert_eq!(
            markup_activity("<p>the word onion = tasty</p>"),
            None,
            "text, not a tag"
        );
        assert_eq!(markup_activity("<p class=\"one\">done</p>"), None);
    }

    #[test]
    fn the_policy_reads_families_and_tenant_limits() {
        let mut p = Policy {
            allowed: vec!["text/*".into(), "application/pdf".into()],
            ..Policy::default()
        };
        assert!(p.allows("text/csv") && p.allows("application/pdf") && !p.allows("image/png"));
        let big = TenantId::new("big").unwrap();
        p.tenant_max_bytes.insert(big.clone(), 1);
        assert_eq!(p.limit(&big), 1);
        assert_eq!(p.limit(&TenantId::new("other").unwrap()), p.max_bytes);
    }
}
