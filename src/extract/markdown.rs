//! Markdown (CommonMark with tables): pulldown-cmark's event stream, so nesting is a counter,
//! not recursion. Headings open sections; paragraphs, list items, table rows and code blocks
//! end lines; code blocks keep their text as it is; markup characters, raw HTML tags and link
//! targets are dropped (link text is kept).

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use super::{ExtractResult, Extracted, TextBuilder};

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
    builder.finish(0)
}
