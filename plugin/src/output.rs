//! The one door between `kubectl baton` and the terminal: every command's output leaves through
//! [`out`] or [`err`], as lines, and each line leaves with every control character escaped
//! (`\n`, `\r`, `\u{1b}`, …). What is printed carries what namespace users wrote (a halt's or a
//! rollback's reason, an annotation's value, a check's error text from Prometheus): printed raw,
//! an escape sequence would drive the reader's terminal, and a line break would forge a line of
//! output (`rollout group ingester is complete`) that a pipeline reads as baton's.
//!
//! Line breaks are the commands' own: a command hands over its lines, never text with breaks
//! in it, so a break inside a value is inside a line, and escaped. The crate denies
//! `println!` and its kin everywhere but here, so no command can go round this door; the
//! progress bars of `wait`, drawn by `indicatif`, take their text from [`line`].

use std::borrow::Cow;
use std::io::Write;

/// `text` with every control character escaped. A line that has none is returned as it is.
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// `text`'s lines, for a renderer whose every line break is its own (a serializer's output:
/// JSON and YAML escape what they carry).
pub fn lines_of(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

/// Writes `lines` to `to`, each escaped and ended by a line break.
pub fn write<I, S>(to: &mut impl Write, lines: I) -> std::io::Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    for text in lines {
        writeln!(to, "{}", line(text.as_ref()))?;
    }
    Ok(())
}

/// Prints `lines` on standard output. A closed pipe (`| head`) ends the printing, not the
/// command.
pub fn out<I, S>(lines: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let _ = write(&mut std::io::stdout().lock(), lines);
}

/// Prints `lines` on standard error.
pub fn err<I, S>(lines: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let _ = write(&mut std::io::stderr().lock(), lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_of_a_line_is_escaped_and_the_rest_kept() {
        let forged = "oops\u{1b}[2J\u{7}\rrollout group ingester is complete\n\tend\u{0}";
        let mut printed = Vec::new();
        write(&mut printed, ["plain line", forged, ""]).expect("writing to memory");
        let printed = String::from_utf8(printed).expect("UTF-8");
        assert_eq!(
            printed,
            "plain line\n\
             oops\\u{1b}[2J\\u{7}\\rrollout group ingester is complete\\n\\tend\\u{0}\n\
             \n"
        );
        // Only the breaks between lines are left, one per line handed over
        assert_eq!(printed.matches('\n').count(), 3);
        assert!(!printed.chars().any(|c| c.is_control() && c != '\n'));
    }

    #[test]
    fn a_clean_line_is_not_copied_and_text_made_of_lines_splits_at_its_breaks() {
        assert!(matches!(line("ingester: complete"), Cow::Borrowed(_)));
        assert_eq!(lines_of("{\n  \"a\": 1\n}\n"), ["{", "  \"a\": 1", "}"]);
        // Non-ASCII text that is not control is kept as written
        assert_eq!(line("rev-1 → rev-2 ✓"), "rev-1 → rev-2 ✓");
    }
}
