//! Cutting text without cutting a character.
//!
//! Every function in Forge that cuts, caps or slices text a person or a model wrote goes through
//! here or through the standard library's character-boundary functions
//! ([`str::floor_char_boundary`], [`str::char_indices`]): a byte offset taken from a length or a
//! constant lands inside a multi-byte character as soon as the text is not ASCII, and slicing
//! there panics. With the `proptest` feature, `strategy` gives the arbitrary Unicode text that
//! each such function is property-tested over.

/// The first `max` characters of `text` (all of it when it is shorter).
pub fn prefix_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `text` cut to its first `max` characters with `marker` appended when it was longer.
pub fn capped(text: &str, max: usize, marker: &str) -> String {
    let prefix = prefix_chars(text, max);
    if prefix.len() == text.len() {
        text.to_owned()
    } else {
        format!("{prefix}{marker}")
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn prefix_bytes(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// Whether `c` is invisible or reorders text: format characters a reader cannot see (zero-width
/// characters, bidirectional embeddings, overrides and isolates, tag characters, variation
/// selectors). Text a person will read and trust (an MCP tool's description, a file's name) must
/// not carry them: `report\u{202E}fdp.txt` shows as `reporttxt.pdf`.
pub fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}'                  // soft hyphen
        | '\u{034F}'                // combining grapheme joiner
        | '\u{061C}'                // Arabic letter mark
        | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' // Hangul fillers
        | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}'   // Mongolian selectors and vowel separator
        | '\u{200B}'..='\u{200F}'   // zero-width space, joiners, LRM/RLM
        | '\u{202A}'..='\u{202E}'   // bidi embeddings and overrides
        | '\u{2060}'..='\u{206F}'   // word joiner, invisible operators, bidi isolates
        | '\u{FE00}'..='\u{FE0F}'   // variation selectors
        | '\u{FEFF}'                // zero-width no-break space
        | '\u{FFF9}'..='\u{FFFB}'   // interlinear annotations
        | '\u{1D173}'..='\u{1D17A}' // musical format characters
        | '\u{E0000}'..='\u{E007F}' // tag characters
        | '\u{E0100}'..='\u{E01EF}' // variation selectors supplement
    )
}

/// Strategies for property tests over arbitrary Unicode.
#[cfg(any(test, feature = "proptest"))]
pub mod strategy {
    use proptest::prelude::*;

    /// Characters that break code which assumes one byte a character or one character a glyph:
    /// two-, three- and four-byte UTF-8, combining marks, emoji with joiners and skin tones,
    /// right-to-left text and bidirectional controls, zero-width characters, NUL and other
    /// controls, and the whitespace and punctuation text is usually cut at.
    const AWKWARD: &[char] = &[
        'é',
        'ß',
        'Ж',
        'ø',
        '中',
        '文',
        '日',
        '本',
        'ह',
        'ि',
        '\u{0301}',
        '\u{0308}',
        '\u{20DD}',
        '😀',
        '👍',
        '\u{1F3FD}',
        '\u{200D}',
        '👩',
        '🚀',
        'א',
        'ב',
        'ש',
        'ل',
        'م',
        '\u{202E}',
        '\u{202D}',
        '\u{2066}',
        '\u{200B}',
        '\u{FEFF}',
        '\0',
        '\u{7}',
        '\u{1B}',
        '\r',
        '\n',
        '\t',
        ' ',
        '\u{A0}',
        '\u{2028}',
        '.',
        '?',
        '!',
        '#',
        '<',
        '>',
        '&',
        ';',
        '"',
        '\\',
        'a',
        'Z',
        '0',
        '\u{10FFFF}',
        '\u{FFFD}',
    ];

    /// Text of up to `max_chars` characters, mixing [`AWKWARD`] characters with any character
    /// at all.
    pub fn unicode(max_chars: usize) -> impl Strategy<Value = String> {
        let one = prop_oneof![
            4 => proptest::sample::select(AWKWARD),
            1 => any::<char>(),
        ];
        proptest::collection::vec(one, 0..=max_chars).prop_map(|cs| cs.into_iter().collect())
    }

    /// Text of up to `max_chars` characters in runs of one repeated [`AWKWARD`] character, so
    /// that long stretches without a space or a single-byte character are common (the shape
    /// that made the chunker cut inside a character).
    pub fn unicode_runs(max_chars: usize) -> impl Strategy<Value = String> {
        let run = (proptest::sample::select(AWKWARD), 1..=max_chars.max(1));
        proptest::collection::vec(run, 0..=4).prop_map(move |runs| {
            let mut out = String::new();
            for (c, n) in runs {
                out.extend(std::iter::repeat_n(c, n));
            }
            super::prefix_chars(&out, max_chars).to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::strategy::{unicode, unicode_runs};
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn prefixes_are_prefixes_within_their_bound(
            text in prop_oneof![unicode(300), unicode_runs(300)],
            max in 0usize..400,
        ) {
            let p = prefix_chars(&text, max);
            prop_assert!(text.starts_with(p));
            prop_assert_eq!(p.chars().count(), max.min(text.chars().count()));
            let b = prefix_bytes(&text, max);
            prop_assert!(text.starts_with(b));
            prop_assert!(b.len() <= max);
            prop_assert!(b.len() + 4 > max.min(text.len()), "at most one character is lost");
            let c = capped(&text, max, "…");
            if text.chars().count() <= max {
                prop_assert_eq!(&c, &text);
            } else {
                prop_assert_eq!(c.strip_suffix('…'), Some(p));
            }
        }
    }
}
