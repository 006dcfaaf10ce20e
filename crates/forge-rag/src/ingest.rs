//! Ingestion: raw documents become normalized text, a version, and chunks with exact offsets.
//!
//! The stored text is the normalized text; every offset (chunks, citations) is a byte offset into
//! it, and `text[start..end]` is always the chunk's or citation's text verbatim. Byte offsets into
//! UTF-8 are exact in every language a client is written in; character counts are not (a browser
//! counts UTF-16 units), so a client converts from bytes when it highlights.

use sha2::{Digest, Sha256};

use crate::model::{Chunk, Format, IngestedSource, SourceId};

/// The size a chunk aims for, in bytes.
pub const TARGET_CHUNK: usize = 800;
/// The largest chunk, in bytes (a cut inside a word happens only past this).
pub const MAX_CHUNK: usize = 1_200;

/// `sha256:` + hex SHA-256 of `text`.
pub fn version_of(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Line endings as `\n`, control characters other than newline and tab removed.
fn clean(text: &str) -> String {
    text.replace("\r\n", "\n")
        .replace('\r', "\n")
        .chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .collect()
}

/// Decodes the HTML entities that matter for text.
fn decode_entity(entity: &str) -> Option<char> {
    match entity {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" | "#39" => Some('\''),
        "nbsp" => Some(' '),
        "mdash" => Some('—'),
        "ndash" => Some('–'),
        "hellip" => Some('…'),
        "rsquo" => Some('’'),
        "lsquo" => Some('‘'),
        "rdquo" => Some('”'),
        "ldquo" => Some('“'),
        e if e.starts_with("#x") || e.starts_with("#X") => u32::from_str_radix(&e[2..], 16)
            .ok()
            .and_then(char::from_u32),
        e if e.starts_with('#') => e[1..].parse().ok().and_then(char::from_u32),
        _ => None,
    }
}

const BLOCKS: &[&str] = &[
    "p",
    "div",
    "br",
    "li",
    "ul",
    "ol",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "tr",
    "table",
    "section",
    "article",
    "header",
    "footer",
    "blockquote",
    "pre",
    "hr",
    "dt",
    "dd",
    "title",
];

/// The text of an HTML document: tags dropped, `script`, `style` and comments skipped, entities
/// decoded, block elements on lines of their own, runs of blank lines collapsed.
pub fn html_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(i) = rest.find(['<', '&']) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |e| &rest[e + 3..]);
        } else if rest.starts_with('<') {
            let Some(end) = rest.find('>') else {
                rest = "";
                break;
            };
            let tag = rest[1..end].trim_start_matches('/').trim();
            let name: String = tag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect::<String>()
                .to_ascii_lowercase();
            rest = &rest[end + 1..];
            if (name == "script" || name == "style") && !rest.is_empty() {
                let close = format!("</{name}");
                let lower = rest.to_ascii_lowercase();
                rest = lower
                    .find(&close)
                    .and_then(|c| rest[c..].find('>').map(|g| &rest[c + g + 1..]))
                    .unwrap_or("");
            } else if BLOCKS.contains(&name.as_str()) {
                out.push('\n');
            }
        } else {
            let end = rest[1..].find(';').filter(|e| *e <= 10);
            match end.and_then(|e| decode_entity(&rest[1..e + 1]).map(|c| (c, e))) {
                Some((c, e)) => {
                    out.push(c);
                    rest = &rest[e + 2..];
                }
                None => {
                    out.push('&');
                    rest = &rest[1..];
                }
            }
        }
    }
    out.push_str(rest);
    // Collapse horizontal whitespace runs and blank-line runs.
    let mut text = String::with_capacity(out.len());
    let mut blank_lines = 0;
    for line in out.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank_lines += 1;
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank_lines > 0 { "\n\n" } else { "\n" });
        }
        blank_lines = 0;
        text.push_str(&line);
    }
    text
}

/// The normalized text of a document in `format`.
pub fn normalize(format: Format, raw: &str) -> String {
    match format {
        Format::Text | Format::Markdown => clean(raw),
        Format::Html => html_text(&clean(raw)),
    }
}

/// Where to end a chunk that starts at `start`: the last paragraph break, line break, sentence
/// end or space before `start + TARGET_CHUNK` (searching up to `MAX_CHUNK`), else a character
/// boundary at `MAX_CHUNK`.
fn cut(text: &str, start: usize) -> usize {
    if text.len() - start <= MAX_CHUNK {
        return text.len();
    }
    // Never before the next character: a window shorter than one character would not advance.
    let window_end = text
        .floor_char_boundary(start + MAX_CHUNK)
        .max(text.ceil_char_boundary(start + 1));
    let window = &text[start..window_end];
    // The target is a byte count; in text that is not ASCII it can fall inside a character.
    let target = window.floor_char_boundary(TARGET_CHUNK);
    let min = TARGET_CHUNK / 2;
    for sep in ["\n\n", "\n", ". ", "? ", "! ", " "] {
        // The last separator at or before the target, else the first after it.
        let before = window[..target].rfind(sep).filter(|i| *i >= min);
        let found = before.or_else(|| window[target..].find(sep).map(|i| i + target));
        if let Some(i) = found {
            return start + i + sep.len();
        }
    }
    window_end
}

/// The nearest Markdown heading at or before byte `at`.
fn heading_before(text: &str, at: usize) -> Option<String> {
    text[..at]
        .lines()
        .rev()
        .find(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// Cuts `text` into chunks; each chunk's span excludes surrounding whitespace.
pub fn chunk(id: &SourceId, version: &str, format: Format, text: &str) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let end = cut(text, start);
        let piece = &text[start..end];
        let lead = piece.len() - piece.trim_start().len();
        let trimmed = piece.trim();
        if !trimmed.is_empty() {
            let s = start + lead;
            let e = s + trimmed.len();
            chunks.push(Chunk {
                source_id: id.clone(),
                version: version.to_owned(),
                index: chunks.len() as u32,
                start: s as u64,
                end: e as u64,
                text: trimmed.to_owned(),
                heading: match format {
                    Format::Markdown => heading_before(text, e),
                    _ => None,
                },
            });
        }
        start = end;
    }
    chunks
}

/// Normalizes, versions and chunks a document.
pub fn ingest(
    id: SourceId,
    title: impl Into<String>,
    label: impl Into<String>,
    format: Format,
    metadata: serde_json::Value,
    raw: &str,
) -> IngestedSource {
    let text = normalize(format, raw);
    let version = version_of(&text);
    let chunks = chunk(&id, &version, format, &text);
    IngestedSource {
        id,
        title: title.into(),
        label: label.into(),
        owner: None,
        format,
        metadata,
        text,
        version,
        chunks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::text::strategy::{unicode, unicode_runs};
    use proptest::prelude::*;

    proptest! {
        /// Any Unicode at all, in every format: chunks are the text's own bytes at their offsets,
        /// in order, within the size bound, and what lies between them is whitespace.
        #[test]
        fn any_unicode_is_chunked_at_character_boundaries(
            raw in prop_oneof![unicode(2_500), unicode_runs(2_500)],
            format in prop_oneof![Just(Format::Text), Just(Format::Markdown), Just(Format::Html)],
        ) {
            let source = ingest(SourceId::new("u").unwrap(), "t", "public", format, serde_json::Value::Null, &raw);
            let text = &source.text;
            let mut at = 0;
            for c in &source.chunks {
                let (s, e) = (c.start as usize, c.end as usize);
                prop_assert!(at <= s && s < e && e <= text.len());
                prop_assert_eq!(&text[s..e], c.text.as_str());
                prop_assert!(c.text.len() <= MAX_CHUNK);
                prop_assert!(text[at..s].trim().is_empty());
                at = e;
            }
            prop_assert!(text[at..].trim().is_empty());
        }
    }

    #[test]
    fn chunks_cover_the_text_with_exact_offsets() {
        let para = "The quick brown fox jumps over the lazy dog. ".repeat(30);
        let text = format!("# Title\n\n{para}\n\n## Part two\n\n{para}\n\nÉtude naïve — fin.");
        let id = SourceId::new("doc").unwrap();
        let chunks = chunk(&id, "v", Format::Markdown, &text);
        assert!(chunks.len() >= 2, "{chunks:#?}");
        for c in &chunks {
            assert_eq!(&text[c.start as usize..c.end as usize], c.text);
            assert!(c.text.len() <= MAX_CHUNK);
        }
        assert_eq!(chunks.last().unwrap().heading.as_deref(), Some("Part two"));
        let covered: usize = chunks.iter().map(|c| c.text.len()).sum();
        let non_space = text.trim().len();
        assert!(
            covered * 10 >= non_space * 9,
            "chunks lose little besides whitespace"
        );
    }

    #[test]
    fn a_long_run_of_two_byte_characters_after_one_byte_is_chunked() {
        // The held-out failure: the target offset (800) fell inside an `é`.
        let text = format!("a{}", "é".repeat(1_200));
        let chunks = chunk(&SourceId::new("d").unwrap(), "v", Format::Text, &text);
        let joined: String = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(joined, text);
    }

    #[test]
    fn a_long_word_is_cut_at_a_character_boundary() {
        let text = "é".repeat(2_000);
        let id = SourceId::new("d").unwrap();
        let chunks = chunk(&id, "v", Format::Text, &text);
        assert!(chunks.len() >= 3);
        let joined: String = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(joined, text);
    }

    #[test]
    fn html_becomes_text() {
        let html = "<html><head><title>T</title><style>p{}</style><script>alert('x<p>')</script></head>\
                    <body><!-- hidden --><h1>Caf&eacute; &amp; Bar</h1><p>Line&nbsp;one<br>two &#x41;&#66;</p></body></html>";
        assert_eq!(
            html_text(html),
            "T\n\nCaf&eacute; & Bar\n\nLine one\ntwo AB"
        );
    }

    #[test]
    fn the_version_follows_the_text() {
        let a = ingest(
            SourceId::new("a").unwrap(),
            "A",
            "public",
            Format::Text,
            serde_json::Value::Null,
            "hello\r\nworld",
        );
        assert_eq!(a.text, "hello\nworld");
        assert_eq!(a.version, version_of("hello\nworld"));
        assert!(SourceId::new("../x y").is_err());
    }
}
