//! Markdown (CommonMark with tables): pulldown-cmark's event stream, so nesting is a counter,
//! not recursion. Headings open sections; paragraphs, list items, table rows and code blocks
//! end lines; code blocks keep their text as it is; markup characters, raw HTML tags and link
//! targets are dropped (link text is kept).
//!
//! Front matter is metadata, not text: a YAML block (`---` to `---` or `...`) or a TOML one
//! (`+++` to `+++`) opening the document, every line of it shaped as metadata (`key: value`,
//! `key = value`, comments, indented continuations, list items, tables), is left out of the text
//! and the sections, and its top-level `title` is the document's title
//! ([`Extracted::title`]). Only the very start counts: pulldown-cmark's metadata options are
//! not used, since they take a block between two `---` lines anywhere in the document, and
//! text between two thematic breaks would be lost. A block that does not look like metadata,
//! or is never closed, is read as Markdown.

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use super::builder::MAX_TITLE_CHARS;
use super::{ExtractResult, Extracted, TextBuilder};

/// The two front matter syntaxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Syntax {
    /// `---` … `---` (or `...`): Jekyll, Hugo, MkDocs, Docusaurus.
    Yaml,
    /// `+++` … `+++`: Hugo, Zola.
    Toml,
}

/// The first line of `text` (without its `\n`) and what follows it; `None` when `text` is empty.
fn split_line(text: &str) -> Option<(&str, &str)> {
    if text.is_empty() {
        return None;
    }
    Some(text.split_once('\n').unwrap_or((text, "")))
}

/// A line without its trailing spaces, tabs and `\r`.
fn trim_line(line: &str) -> &str {
    line.trim_end_matches([' ', '\t', '\r'])
}

/// Whether `key` is a bare metadata key (`title`, `last_modified`, `og.image`, `x-tag`).
fn bare_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|character| character.is_alphanumeric() || matches!(character, '_' | '-' | '.'))
}

/// Whether a line of a front matter block is shaped as metadata of `syntax`.
fn metadata_line(syntax: Syntax, line: &str) -> bool {
    let line = trim_line(line);
    if line.is_empty() || line.starts_with([' ', '\t', '#']) {
        return true;
    }
    match syntax {
        Syntax::Yaml => {
            line == "-"
                || line.starts_with("- ")
                || line
                    .split_once(':')
                    .is_some_and(|(key, value)| bare_key(key) && (value.is_empty() || value.starts_with([' ', '\t'])))
        }
        Syntax::Toml => {
            line.starts_with(['[', ']'])
                || line.split_once('=').is_some_and(|(key, _)| bare_key(key.trim().trim_matches(['"', '\''])))
        }
    }
}

/// The front matter opening `markdown`: its syntax, its lines, and the document after it.
fn front_matter(markdown: &str) -> Option<(Syntax, &str, &str)> {
    let (first, mut rest) = split_line(markdown)?;
    let syntax = match trim_line(first) {
        "---" => Syntax::Yaml,
        "+++" => Syntax::Toml,
        _ => return None,
    };
    let start = markdown.len() - rest.len();
    loop {
        let (line, after) = split_line(rest)?;
        let closes = match syntax {
            Syntax::Yaml => matches!(trim_line(line), "---" | "..."),
            Syntax::Toml => trim_line(line) == "+++",
        };
        if closes {
            let block = &markdown[start..markdown.len() - rest.len()];
            return block.lines().all(|line| metadata_line(syntax, line)).then_some((syntax, block, after));
        }
        rest = after;
    }
}

/// The top-level `title` of a front matter block: a YAML plain or quoted scalar, a TOML string;
/// whitespace collapsed, at most [`MAX_TITLE_CHARS`] characters; `None` when absent, empty or
/// of another shape (a block scalar, a list).
fn front_matter_title(syntax: Syntax, block: &str) -> Option<String> {
    let value = block
        .lines()
        .map_while(|line| (syntax == Syntax::Yaml || !line.starts_with('[')).then_some(line))
        .find_map(|line| {
            let (key, value) = match syntax {
                Syntax::Yaml => line.split_once(':')?,
                Syntax::Toml => line.split_once('=')?,
            };
            (key.trim_end() == "title" && !line.starts_with([' ', '\t'])).then_some(value.trim())
        })?;
    let text = match value.chars().next()? {
        quote @ ('"' | '\'') => {
            let inner = &value[1..];
            let mut text = String::new();
            let mut characters = inner.chars().peekable();
            // An unclosed string is no title.
            loop {
                match characters.next()? {
                    // `\"` in double quotes, `''` in single ones.
                    '\\' if quote == '"' => text.push(characters.next()?),
                    '\'' if quote == '\'' && characters.peek() == Some(&'\'') => {
                        characters.next();
                        text.push('\'');
                    }
                    character if character == quote => break,
                    character => text.push(character),
                }
            }
            text
        }
        // A YAML plain scalar, up to a comment; TOML has no unquoted strings.
        _ if syntax == Syntax::Yaml && !value.starts_with(['|', '>', '[', '{', '&', '*', '!']) => {
            value.split(" #").next().unwrap_or_default().to_owned()
        }
        _ => return None,
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    let title: String =
        words.join(" ").chars().filter(|character| !character.is_control()).take(MAX_TITLE_CHARS).collect();
    (!title.is_empty()).then_some(title)
}

fn level(heading: HeadingLevel) -> u8 {
    match heading {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

pub(super) fn extract(markdown: &str, mut builder: TextBuilder) -> ExtractResult<Extracted> {
    let (title, markdown) = match front_matter(markdown) {
        Some((syntax, block, rest)) => (front_matter_title(syntax, block), rest),
        None => (None, markdown),
    };
    let parser = Parser::new_ext(markdown, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH);
    let mut heading: Option<(u8, String)> = None;
    let mut in_code = false;
    for event in parser {
        match event {
            Event::Start(Tag::Heading { level: heading_level, .. }) => {
                heading = Some((level(heading_level), String::new()))
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((heading_level, title)) = heading.take() {
                    builder.heading(heading_level, &title)?;
                }
            }
            Event::Start(Tag::CodeBlock(_)) => {
                builder.paragraph_break()?;
                in_code = true;
            }
            Event::End(TagEnd::CodeBlock) => {
                in_code = false;
                builder.paragraph_break()?;
            }
            Event::Text(text) | Event::Code(text) | Event::InlineMath(text) | Event::DisplayMath(text) => {
                match heading.as_mut() {
                    Some((_, title)) => title.push_str(&text),
                    None if in_code => builder.push_raw(&text)?,
                    None => builder.push_inline(&text)?,
                }
            }
            Event::SoftBreak => match heading.as_mut() {
                Some((_, title)) => title.push(' '),
                None => builder.push_inline(" ")?,
            },
            Event::HardBreak => builder.line_break()?,
            Event::End(TagEnd::Paragraph | TagEnd::BlockQuote(_) | TagEnd::List(_) | TagEnd::Table) => {
                builder.paragraph_break()?
            }
            Event::Start(Tag::Item) | Event::End(TagEnd::Item | TagEnd::TableHead | TagEnd::TableRow) => {
                builder.line_break()?
            }
            Event::End(TagEnd::TableCell) => builder.push_inline(" | ")?,
            Event::Rule => builder.paragraph_break()?,
            _ => {}
        }
    }
    let mut extracted = builder.finish(0)?;
    extracted.title = title;
    Ok(extracted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn title_of(markdown: &str) -> Option<String> {
        let (syntax, block, _) = front_matter(markdown)?;
        front_matter_title(syntax, block)
    }

    #[test]
    fn titles_are_read_from_yaml_and_toml_scalars() {
        assert_eq!(title_of("---\ntitle: Plain  title # a comment\n---\n").as_deref(), Some("Plain title"));
        assert_eq!(title_of("---\r\ntitle: 'It''s here'\r\n---\r\n").as_deref(), Some("It's here"));
        assert_eq!(title_of("---\ntitle: \"Say \\\"hi\\\"\"\n---\n").as_deref(), Some("Say \"hi\""));
        assert_eq!(title_of("+++\ntitle = \"Guide\"\n+++\n").as_deref(), Some("Guide"));
        // Nested, block scalars, unclosed strings, TOML bare values and table keys: no title.
        assert_eq!(title_of("---\nmeta:\n  title: Nested\n---\n"), None);
        assert_eq!(title_of("---\ntitle: >\n  Folded\n---\n"), None);
        assert_eq!(title_of("---\ntitle: \"unclosed\n---\n"), None);
        assert_eq!(title_of("+++\ntitle = bare\n+++\n"), None);
        assert_eq!(title_of("+++\n[extra]\ntitle = \"In a table\"\n+++\n"), None);
        let long = format!("---\ntitle: {}\n---\n", "word ".repeat(100));
        assert_eq!(title_of(&long).map(|title| title.chars().count()), Some(MAX_TITLE_CHARS));
    }

    #[test]
    fn only_a_closed_block_of_metadata_lines_at_the_start_is_front_matter() {
        assert_eq!(front_matter("---\ntitle: A\n---\nBody\n").map(|(_, _, rest)| rest), Some("Body\n"));
        assert_eq!(front_matter("---\ntitle: A\n...").map(|(_, _, rest)| rest), Some(""));
        // Prose between two rules, an unclosed block, a block that is not first: Markdown.
        assert!(front_matter("---\nSome intro paragraph.\n---\n\nBody.\n").is_none());
        assert!(front_matter("---\ntitle: A\n").is_none());
        assert!(front_matter("\n---\ntitle: A\n---\n").is_none());
        assert!(front_matter("----\ntitle: A\n----\n").is_none());
    }
}
