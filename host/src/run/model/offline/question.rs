//! What kind of answer a question wants, and whether a piece of text holds
//! that kind of thing (a duration, a time, a command, a reason...).

use super::words::{keywords, stem};

/// The closed set of question kinds the answerer tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wants {
    /// "how long": a duration.
    Duration,
    /// "how often": a frequency.
    Frequency,
    /// "when", "what time": a moment or a condition.
    Time,
    /// "how many", "how much": a number.
    Count,
    /// "why": a reason.
    Reason,
    /// "who", "which team": a person or a group.
    Owner,
    /// "where": a place, path or address.
    Place,
    /// "how do I", "which command": a step or a command.
    Procedure,
    /// "what is", "what does X mean": a definition.
    Definition,
    /// Anything else: the best-matching sentence.
    Other,
}

/// Lead-ins that carry the kind; their words are not topic words.
const LEADS: &[(&str, Wants)] = &[
    ("how long", Wants::Duration),
    ("how often", Wants::Frequency),
    ("how frequently", Wants::Frequency),
    ("how many", Wants::Count),
    ("how much", Wants::Count),
    ("how quickly", Wants::Duration),
    ("how soon", Wants::Duration),
    ("what kind of", Wants::Definition),
    ("what type of", Wants::Definition),
    ("what sort of", Wants::Definition),
    ("what time", Wants::Time),
    ("which day", Wants::Time),
    ("what day", Wants::Time),
    ("when", Wants::Time),
    ("why", Wants::Reason),
    ("what is the reason", Wants::Reason),
    ("who", Wants::Owner),
    ("whom", Wants::Owner),
    ("whose", Wants::Owner),
    ("which team", Wants::Owner),
    ("what team", Wants::Owner),
    ("where", Wants::Place),
    ("which command", Wants::Procedure),
    ("what command", Wants::Procedure),
    ("which tool", Wants::Procedure),
    ("what tool", Wants::Procedure),
    ("how do i", Wants::Procedure),
    ("how do you", Wants::Procedure),
    ("how can i", Wants::Procedure),
    ("how should i", Wants::Procedure),
    ("how to", Wants::Procedure),
    ("how do we", Wants::Procedure),
    ("what does", Wants::Definition),
    ("what is", Wants::Definition),
    ("what are", Wants::Definition),
    ("what's", Wants::Definition),
];

/// Words that only say which kind is asked for.
const KIND_WORDS: &[&str] = &[
    "long",
    "often",
    "frequently",
    "many",
    "much",
    "quickly",
    "soon",
    "fast",
    "time",
    "reason",
    "command",
    "tool",
    "mean",
    "means",
];

/// Openers of a message that leans on the previous one ("and", "so"...).
pub const LEAN_OPENERS: &[&str] = &["and", "so", "also", "but", "then", "ok", "okay", "now"];

/// The message with a leading "and", "so"... removed, lower-cased.
pub fn core(message: &str) -> String {
    let mut lower = message.trim().to_lowercase();
    loop {
        let first = lower
            .split(|c: char| c.is_whitespace() || c == ',')
            .next()
            .unwrap_or("")
            .to_string();
        if first.is_empty() || !LEAN_OPENERS.contains(&first.as_str()) {
            return lower;
        }
        lower = lower[first.len()..]
            .trim_start_matches([',', ' '])
            .to_string();
    }
}

/// The kind of answer the message asks for.
pub fn wants(message: &str) -> Wants {
    let core = core(message);
    // "In which file...": the lead-in may follow a preposition.
    let core = ["in ", "on ", "at ", "for ", "to ", "by ", "from "]
        .iter()
        .find_map(|p| core.strip_prefix(p))
        .unwrap_or(&core);
    for (lead, kind) in LEADS {
        if core.starts_with(lead)
            && core[lead.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric())
        {
            return *kind;
        }
    }
    if core.contains("how often") || core.contains("how frequently") {
        return Wants::Frequency;
    }
    if core.contains("how long") {
        return Wants::Duration;
    }
    if core.contains("how many") || core.contains("how much") {
        return Wants::Count;
    }
    if core.contains("command") {
        return Wants::Procedure;
    }
    Wants::Other
}

/// The topic words of a question: its keywords without the words that only
/// name the kind of answer.
pub fn topic(message: &str) -> Vec<String> {
    let kind_stems: Vec<String> = KIND_WORDS.iter().map(|w| stem(w)).collect();
    let typed = answer_type(message).map(|w| stem(&w));
    let words: Vec<String> = keywords(message)
        .into_iter()
        .filter(|k| !kind_stems.contains(k))
        .collect();
    let without_type: Vec<String> = words
        .iter()
        .filter(|k| Some(*k) != typed.as_ref())
        .cloned()
        .collect();
    if without_type.is_empty() {
        words
    } else {
        without_type
    }
}

/// The noun naming what a "which X" / "what X" question wants ("which
/// algorithm", "what port"): the answer holds an instance of it, seldom the
/// word itself.
fn answer_type(message: &str) -> Option<String> {
    const AUX: &[&str] = &[
        "is", "are", "was", "were", "does", "do", "did", "can", "should", "will", "would", "has",
        "have", "happens", "happened", "about", "if", "a", "an", "the", "of", "kind", "type",
        "sort",
    ];
    let c = core(message);
    // "Since which version...", "In what file...": the lead-in may come second.
    let rest = c
        .split_whitespace()
        .take(2)
        .find(|w| *w == "which" || *w == "what")
        .and_then(|w| c.find(&format!("{w} ")).map(|at| &c[at + w.len() + 1..]))?;
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '-')
        .collect();
    (!word.is_empty() && !AUX.contains(&word.as_str())).then_some(word)
}

const UNITS_OF_TIME: &[&str] = &[
    "second", "minute", "hour", "day", "week", "month", "year", "sec", "min", "ms", "business",
];
const NUMBER_WORDS: &[&str] = &[
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "fifteen",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "hundred",
    "thousand",
    "once",
    "twice",
    "single",
    "half",
    "dozen",
    "dozens",
    "hundreds",
    "thousands",
    "millions",
    "million",
    "billions",
    "several",
    "few",
    "a",
];
const WEEKDAYS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "weekday",
    "weekend",
    "daily",
    "weekly",
    "monthly",
];
const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

fn words_of(lower: &str) -> Vec<&str> {
    lower
        .split(|c: char| !c.is_alphanumeric() && c != ':' && c != '-')
        .filter(|w| !w.is_empty())
        .collect()
}

fn is_number(w: &str) -> bool {
    w.chars().next().is_some_and(|c| c.is_ascii_digit()) || NUMBER_WORDS.contains(&w)
}

fn is_time_unit(w: &str) -> bool {
    let w = w.trim_end_matches('s');
    UNITS_OF_TIME.contains(&w)
}

fn has_duration(lower: &str) -> bool {
    let words = words_of(lower);
    words
        .windows(2)
        .any(|p| is_number(p[0]) && is_time_unit(p[1]))
        || words.iter().any(|w| {
            w.split_once('-')
                .is_some_and(|(n, u)| is_number(n) && is_time_unit(u))
        })
        || [
            "immediately",
            "at once",
            "right away",
            "forever",
            "indefinitely",
        ]
        .iter()
        .any(|p| lower.contains(p))
}

fn has_any(lower: &str, needles: &[&str]) -> bool {
    let words = words_of(lower);
    needles.iter().any(|n| {
        if n.contains(' ') {
            lower.contains(n)
        } else {
            words.contains(n)
        }
    })
}

/// Whether `text` (with its heading) holds the kind of thing `wants` asks for.
pub fn bears(wants: Wants, text: &str, heading: &str) -> bool {
    let lower = text.to_lowercase();
    let heading = heading.to_lowercase();
    match wants {
        Wants::Duration => has_duration(&lower),
        Wants::Frequency => {
            has_duration(&lower)
                || has_any(
                    &lower,
                    &[
                        "every", "each", "daily", "weekly", "monthly", "yearly", "annually",
                        "hourly", "nightly", "once", "twice", "times", "per", "always", "never",
                    ],
                )
        }
        Wants::Time => {
            has_duration(&lower)
                || words_of(&lower).iter().any(|w| {
                    WEEKDAYS.contains(w)
                        || MONTHS.contains(w)
                        || (w.contains(':') && w.chars().next().is_some_and(|c| c.is_ascii_digit()))
                        || (w.len() == 4 && w.starts_with(['1', '2']) && w.parse::<u32>().is_ok())
                })
                || has_any(
                    &lower,
                    &[
                        "before",
                        "after",
                        "until",
                        "utc",
                        "noon",
                        "midnight",
                        "during",
                        "whenever",
                        "when",
                        "once",
                        "every",
                        "on merge",
                        "as soon as",
                    ],
                )
        }
        Wants::Count => words_of(&lower).iter().any(|w| is_number(w) && *w != "a"),
        Wants::Reason => {
            heading.starts_with("why")
                || heading.contains(" > why")
                || has_any(
                    &lower,
                    &[
                        "because",
                        "so that",
                        "so",
                        "since",
                        "to avoid",
                        "to prevent",
                        "in order",
                        "otherwise",
                        "reason",
                        "ensures",
                        "ensure",
                        "therefore",
                        "thus",
                        "lets",
                        "allows",
                        "means",
                        "can",
                        "cannot",
                        "would",
                        "if",
                    ],
                )
        }
        Wants::Owner => {
            has_any(
                &lower,
                &[
                    "team",
                    "owner",
                    "owns",
                    "own",
                    "engineer",
                    "captain",
                    "lead",
                    "manager",
                    "responsible",
                    "maintainer",
                    "maintainers",
                    "developer",
                    "developers",
                    "by",
                    "person",
                    "administrator",
                    "admin",
                    "user",
                    "users",
                    "author",
                    "who",
                ],
            ) || text.contains('@')
        }
        Wants::Place => {
            text.contains('/')
                || text.contains('`')
                || has_any(
                    &lower,
                    &["in", "at", "under", "inside", "on", "from", "http"],
                )
        }
        Wants::Procedure => {
            text.contains('`')
                || lower.starts_with("$ ")
                || has_any(
                    &lower,
                    &["run", "use", "call", "type", "click", "open", "create"],
                )
        }
        Wants::Definition => has_any(&lower, &["is", "are", "means", "refers", "called"]),
        Wants::Other => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_lead_ins() {
        assert_eq!(
            wants("How long does the old key stay valid?"),
            Wants::Duration
        );
        assert_eq!(wants("And how many of those carry over?"), Wants::Count);
        assert_eq!(wants("Why is the ledger append-only?"), Wants::Reason);
        assert_eq!(
            wants("Which command verifies a download?"),
            Wants::Procedure
        );
        assert_eq!(wants("Who owns the signing keys?"), Wants::Owner);
        assert_eq!(wants("When is the handover?"), Wants::Time);
        assert_eq!(wants("Which algorithm is used for new keys?"), Wants::Other);
    }

    #[test]
    fn topic_drops_kind_words() {
        assert_eq!(
            topic("How long does the old key stay valid?"),
            ["old", "key", "stay", "valid"]
        );
        assert_eq!(
            topic("Which algorithm is used for new keys?"),
            ["new", "key"]
        );
    }

    #[test]
    fn recognises_answer_bearing_text() {
        assert!(bears(Wants::Duration, "Acknowledge within 15 minutes.", ""));
        assert!(!bears(Wants::Duration, "Acknowledge the page.", ""));
        assert!(bears(
            Wants::Time,
            "Handover happens every Monday at 10:00 UTC.",
            ""
        ));
        assert!(bears(
            Wants::Reason,
            "Auditors replay it.",
            "Ledger > Why the ledger is append-only"
        ));
        assert!(bears(Wants::Procedure, "Run `make check`.", ""));
    }
}
