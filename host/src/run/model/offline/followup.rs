//! Follow-ups: a question that leans on the previous one ("And how many of
//! those carry over?", "What about the secondary?") is read together with it,
//! so retrieval gets a query that stands alone.

use super::question::{LEAN_OPENERS, Wants, core, topic, wants};
use super::words::content_words;
use crate::run::model::Turn;

/// Words that point back at the previous question's subject.
const POINTERS: &[&str] = &[
    "those", "these", "it", "its", "they", "them", "their", "theirs", "that", "this", "there",
    "he", "she", "him", "her", "ones", "one",
];

/// A question as the answerer reads it.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct Reading {
    /// Standalone wording: the message itself, or the message joined with the
    /// subject of the question it leans on.
    pub query: String,
    /// The kind of answer wanted (from the previous question when the
    /// follow-up does not say, as in "And for the secondary?").
    pub wants: Wants,
    /// Topic words of this message (stemmed); they weigh more than the words
    /// carried over from the previous question.
    pub focus: Vec<String>,
    /// Topic words carried over from the previous question (stemmed).
    pub carried: Vec<String>,
    /// Whether the message was read as a follow-up.
    pub leaned: bool,
}

fn words_lower(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

/// Whether `message` leans on an earlier question.
fn leans(message: &str) -> bool {
    let words = words_lower(message);
    let Some(first) = words.first() else {
        return false;
    };
    if LEAN_OPENERS.contains(&first.as_str()) {
        return true;
    }
    let c = core(message);
    if c.starts_with("what about") || c.starts_with("how about") || c.starts_with("what if") {
        return true;
    }
    // "that"/"this"/"one" often introduce a clause ("the key that signs"); they
    // point back only when nothing follows them.
    let ambiguous = ["that", "this", "one", "there", "her"];
    words.iter().enumerate().any(|(i, w)| {
        POINTERS.contains(&w.as_str()) && (!ambiguous.contains(&w.as_str()) || i + 1 == words.len())
    }) || topic(message).is_empty()
}

/// The message read on its own, or with the questions before it.
pub fn read(message: &str, history: &[Turn]) -> Reading {
    // Earlier questions may lean too: read them in order, each with the one before.
    let mut previous: Option<Reading> = None;
    for turn in history.iter().filter(|t| t.role == "user") {
        previous = Some(read_one(&turn.content, previous.as_ref()));
    }
    read_one(message, previous.as_ref())
}

fn read_one(message: &str, previous: Option<&Reading>) -> Reading {
    let own = Reading {
        query: message.trim().to_string(),
        wants: wants(message),
        focus: topic(message),
        carried: vec![],
        leaned: false,
    };
    let Some(prev) = previous else {
        return own;
    };
    if !leans(message) {
        return own;
    }
    let prev_words = content_words(&prev.query);
    let mine = content_words(message);
    let subject: Vec<&String> = prev_words
        .iter()
        .filter(|w| !mine.contains(w) && !POINTERS.contains(&w.as_str()))
        .collect();
    if subject.is_empty() {
        return own;
    }
    let subject = subject
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let mut carried: Vec<String> = prev.focus.clone();
    carried.extend(prev.carried.iter().cloned());
    carried.retain(|k| !own.focus.contains(k));
    carried.dedup();
    let wants = if own.wants == Wants::Other {
        prev.wants
    } else {
        own.wants
    };
    Reading {
        query: format!("{} ({subject})", strip_opener(message.trim())),
        wants,
        focus: own.focus,
        carried,
        leaned: true,
    }
}

/// "And how many of those carry over?" -> "how many of those carry over?"
fn strip_opener(message: &str) -> String {
    let mut rest = message;
    loop {
        let first = rest
            .split(|c: char| c.is_whitespace() || c == ',')
            .next()
            .unwrap_or("");
        if first.is_empty() || !LEAN_OPENERS.contains(&first.to_lowercase().as_str()) {
            break;
        }
        rest = rest[first.len()..].trim_start_matches([',', ' ']);
    }
    let mut chars = rest.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(s: &str) -> Turn {
        Turn {
            role: "user".into(),
            content: s.into(),
        }
    }

    #[test]
    fn a_leaning_question_takes_the_previous_subject() {
        let history = [
            user("How many vacation days do employees get?"),
            Turn {
                role: "assistant".into(),
                content: "25 days a year.".into(),
            },
        ];
        let r = read("And how many of those carry over?", &history);
        assert!(r.leaned);
        assert_eq!(
            r.query,
            "How many of those carry over? (vacation days employees)"
        );
        assert_eq!(r.wants, Wants::Count);
        assert!(r.carried.contains(&"vacat".to_string()), "{r:?}");
    }

    #[test]
    fn a_standalone_question_is_left_alone() {
        let history = [user("When is the handover?")];
        let r = read("Who owns the signing keys?", &history);
        assert!(!r.leaned);
        assert_eq!(r.query, "Who owns the signing keys?");
    }

    #[test]
    fn what_about_keeps_the_kind_of_answer() {
        let history = [user("How long does the old key stay valid?")];
        let r = read("What about a leaked key?", &history);
        assert!(r.leaned);
        assert_eq!(r.wants, Wants::Duration);
    }
}
