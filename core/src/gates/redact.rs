//! URLs as messages may show them: a hook's or Prometheus' address is written by namespace users
//! and often carries a token, while messages land in Events, halt annotations and the status
//! page; and values others wrote, shortened.

use url::Url;

/// `text` cut to its first `max_chars` characters, marked `…` when cut: what a message shows
/// of a value someone else wrote (a web answer, a Job's message).
pub fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max_chars).collect();
    format!("{kept}…")
}

/// `raw` with no user, password, query or fragment: what a message may show of a URL (a hook's
/// token often rides in its query). Not a URL: only its length.
pub fn redact(raw: &str) -> String {
    match Url::parse(raw.trim()) {
        Ok(mut url) => {
            // Both fail only for URLs that cannot have a user (no host): nothing to remove.
            let _ = url.set_username("");
            let _ = url.set_password(None);
            let hidden = url.query().is_some() || url.fragment().is_some();
            url.set_query(None);
            url.set_fragment(None);
            if hidden {
                format!("{url}?…")
            } else {
                url.to_string()
            }
        }
        Err(_) => format!("<{} characters>", raw.chars().count()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_the_destination_and_drops_credentials_and_queries() {
        assert_eq!(
            redact("https://user:pw@deploys.example.com/hooks?token=abc#x"),
            "https://deploys.example.com/hooks?…"
        );
        assert_eq!(redact("http://h:81/p"), "http://h:81/p");
        assert_eq!(redact("not a url with a secret"), "<23 characters>");
    }
}
