//! Fuzzy filtering for the capture panel's pickers: the query's characters
//! must appear in order (any case); runs of consecutive characters, word
//! starts and an early first match score higher, gaps cost.

/// The score of `text` for `query`, or None when it does not match. An
/// empty query matches everything with score 0.
pub fn score(query: &str, text: &str) -> Option<i32> {
    let q: Vec<char> = query
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    if q.is_empty() {
        return Some(0);
    }
    let t: Vec<char> = text.chars().collect();
    let mut qi = 0;
    let mut score = 0i32;
    let mut prev: Option<usize> = None;
    for (i, &c) in t.iter().enumerate() {
        if qi == q.len() {
            break;
        }
        if c.to_lowercase().eq(std::iter::once(q[qi])) {
            let boundary = i == 0
                || !t[i - 1].is_alphanumeric()
                || (t[i - 1].is_lowercase() && c.is_uppercase());
            score += 10;
            if boundary {
                score += 8;
            }
            match prev {
                Some(p) if p + 1 == i => score += 12,
                Some(p) => score -= (i - p - 1).min(10) as i32,
                None => score -= i.min(15) as i32,
            }
            prev = Some(i);
            qi += 1;
        }
    }
    (qi == q.len()).then_some(score)
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
}
