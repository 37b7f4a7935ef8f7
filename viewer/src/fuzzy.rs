//! Fuzzy matching: the timeline's Fuzzy search and the Capture panel's
//! process and function pickers share this one matcher, so the two cannot
//! drift apart.
//!
//! A query matches a text when the query's characters appear in the text
//! in order, in any case: `pkt` finds `parse_packet`. Every match also has
//! a score, because a picker lists the best matches first: runs of
//! consecutive characters, matches at word starts (after a non-alphanumeric
//! character or at a lower-to-upper case change) and an early first match
//! score higher, and gaps cost. The timeline only needs yes or no
//! ([`fuzzy_match`]), so it ignores the score.
//!
//! The two entry points differ only in how they take the query. [`score`]
//! takes what the user typed, lowercases it and drops its blanks, so a
//! picker's `for ev` finds `forever`. [`fuzzy_match`] takes a needle its
//! caller lowercased already and keeps the blanks in it, so a search for
//! `operator new` needs the blank, as a substring search would.

/// The score of `text` for `query`, or `None` when it does not match:
/// higher is better. Case and the query's blanks are ignored. An empty
/// query matches everything with score 0.
pub(crate) fn score(query: &str, text: &str) -> Option<i32> {
    score_lowercase(
        query
            .chars()
            .filter(|c| !c.is_whitespace())
            .flat_map(char::to_lowercase),
        text,
    )
}

/// Case-insensitive subsequence test; `needle` is already lowercase.
pub(crate) fn fuzzy_match(name: &str, needle: &str) -> bool {
    score_lowercase(needle.chars(), name).is_some()
}

/// The matcher itself: `needle`, already lowercase, against `text`
/// lowercased as it is read. Positions, gaps and word starts are those of
/// the text as written, where the case changes are; a character that
/// lowercases to two (`İ`) offers both to the needle at one position.
fn score_lowercase(needle: impl Iterator<Item = char>, text: &str) -> Option<i32> {
    let mut want = needle.peekable();
    let mut score = 0i32;
    // Position of the previous matched character.
    let mut prev: Option<usize> = None;
    // The text's character before the current one.
    let mut before: Option<char> = None;
    for (i, c) in text.chars().enumerate() {
        for lower in c.to_lowercase() {
            let Some(&w) = want.peek() else {
                return Some(score);
            };
            if lower == w {
                let word_start = before
                    .is_none_or(|b| !b.is_alphanumeric() || (b.is_lowercase() && c.is_uppercase()));
                score += 10;
                if word_start {
                    score += 8;
                }
                match prev {
                    // The next character, or the second of one that
                    // lowercases to two.
                    Some(p) if p + 1 >= i => score += 12,
                    Some(p) => score -= (i - p - 1).min(10) as i32,
                    None => score -= i.min(15) as i32,
                }
                prev = Some(i);
                want.next();
            }
        }
        before = Some(c);
    }
    want.peek().is_none().then_some(score)
}

/// Indices of `items` matching `query`, best first (shorter texts win
/// ties, then the original order).
pub fn filter<T>(items: &[T], query: &str, text: impl Fn(&T) -> String) -> Vec<usize> {
    let mut hits: Vec<(i32, usize, usize)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| {
            let s = text(it);
            score(query, &s).map(|sc| (sc, s.len(), i))
        })
        .collect();
    if !query.trim().is_empty() {
        hits.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    }
    hits.into_iter().map(|(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsequences_match_in_order() {
        assert!(score("tck", "tick").is_some());
        assert!(score("TICK", "tick").is_some());
        assert!(score("kt", "tick").is_none());
        assert_eq!(score("", "anything"), Some(0));
    }

    #[test]
    fn contiguous_and_word_starts_rank_first() {
        let items = ["do_tick_later", "tick", "t_i_c_k", "stick", "main"];
        let order = filter(&items, "tick", |s| s.to_string());
        assert_eq!(items[order[0]], "tick");
        assert_eq!(order.len(), 4, "main does not match");
        assert_eq!(items[*order.last().unwrap()], "t_i_c_k");
        // A pid and a command line match as text too.
        let procs = ["1234 forever /tmp/x/forever", "77 bash -l"];
        let order = filter(&procs, "forev", |s| s.to_string());
        assert_eq!(order, vec![0]);
        let order = filter(&procs, "77", |s| s.to_string());
        assert_eq!(order, vec![1]);
    }

    #[test]
    fn fuzzy_is_a_subsequence() {
        assert!(fuzzy_match("parse_packet", "ppkt"));
        assert!(fuzzy_match("parse_packet", "PARSE".to_lowercase().as_str()));
        assert!(!fuzzy_match("parse_packet", "tkp"));
        assert!(fuzzy_match("anything", ""));
    }

    #[test]
    fn only_the_pickers_ignore_blanks() {
        // A picker's query drops its blanks; the timeline's needle keeps
        // them, so a blank in it has to match one.
        assert!(score("rd blk", "read_block").is_some());
        assert!(!fuzzy_match("read_block", "rd blk"));
        assert!(fuzzy_match("operator new", "op new"));
        // Both lowercase the text before comparing.
        assert!(fuzzy_match("Parse_Packet", "ppkt"));
        assert!(score("ppkt", "Parse_Packet").is_some());
    }
}
