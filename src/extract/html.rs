//! HTML: the page's main text through html5ever's WHATWG tokenizer, with no tree built, so a
//! page of a million nested tags costs a million tokens and no stack. Text inside `script`,
//! `style`, `noscript`, `template`, `nav`, `header`, `footer`, `aside`, `form`, `svg` and the
//! `head` is dropped (script and style content is tokenized as raw text, so it never looks like
//! markup), except a `header` inside an `article`, `main` or `section`: that one is the
//! article's own (its title, its byline) and is kept, while the page's banner outside them is
//! not; `h1`–`h6` open sections; block elements end lines; `pre` keeps its whitespace;
//! character references are decoded by the tokenizer. Permalink anchors are not text: an `a`
//! of a permalink class ([`PERMALINK_CLASSES`]: Sphinx and MkDocs put one after every heading,
//! API signature and caption) is dropped anywhere, and an `a` inside a heading whose only text
//! is a permalink glyph (`¶`, `§`, `#`, an icon font's private-use character) is cut from the
//! heading, so section names hold the heading's words only.

use std::cell::RefCell;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer};

use super::{ExtractError, ExtractResult, Extracted, TextBuilder};

/// Elements whose content is not the page's main text.
const DROPPED: &[&str] =
    &["script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg", "head", "title"];

/// Classes of the permalink anchors documentation generators put in headings: Sphinx and
/// MkDocs (`headerlink`), Docusaurus (`hash-link`), VitePress and markdown-it-anchor
/// (`header-anchor`), AnchorJS (`anchorjs-link`).
const PERMALINK_CLASSES: &[&str] = &["headerlink", "hash-link", "header-anchor", "anchorjs-link"];

/// Whether an anchor's text is one permalink glyph and nothing else visible.
fn permalink_glyph(text: &str) -> bool {
    let invisible = |character: char| {
        character.is_whitespace() || matches!(character, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}')
    };
    let mut visible = text.chars().filter(|&character| !invisible(character));
    match (visible.next(), visible.next()) {
        (Some(glyph), None) => matches!(glyph, '¶' | '§' | '#' | '🔗' | '⚓' | '\u{E000}'..='\u{F8FF}'),
        _ => false,
    }
}

/// Whether a start tag is an `a` of a permalink class.
fn permalink_anchor(tag: &html5ever::tokenizer::Tag) -> bool {
    &*tag.name == "a"
        && tag.attrs.iter().any(|attribute| {
            &*attribute.name.local == "class"
                && attribute.value.split_ascii_whitespace().any(|class| PERMALINK_CLASSES.contains(&class))
        })
}

/// Elements that end a line.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "li",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "table",
    "tr",
    "blockquote",
    "br",
    "hr",
    "figure",
    "figcaption",
    "body",
    "html",
    "caption",
    "details",
    "summary",
    "address",
];

/// The sink's state: the builder, how deep inside dropped elements the tokenizer is (per name,
/// so a stray end tag of another name does not end the drop), the open heading and `pre`.
struct State {
    builder: TextBuilder,
    dropped: Vec<(&'static str, usize)>,
    /// Open `article`, `main` and `section` elements (outside dropped ones).
    sectioning: usize,
    /// Open `header` elements kept as content (inside a sectioning element). A header opened
    /// while one of them is open is kept too, unless something dropped is open: so the
    /// innermost open header is a dropped one whenever any is.
    kept_headers: usize,
    heading: Option<(u8, String)>,
    /// Inside a permalink anchor (anchors do not nest: the next `</a>` ends it).
    permalink: bool,
    /// Length of the open heading's title when an `a` inside it started.
    heading_anchor: Option<usize>,
    pre: usize,
    error: Option<ExtractError>,
}

struct Sink(RefCell<State>);

fn dropped_name(name: &str) -> Option<&'static str> {
    DROPPED.iter().copied().find(|dropped| *dropped == name)
}

impl State {
    fn dropping(&self) -> bool {
        self.permalink || self.dropped.iter().any(|(_, depth)| *depth > 0)
    }

    /// How deep inside dropped elements named `name` the tokenizer is.
    fn dropped_depth(&self, name: &str) -> usize {
        self.dropped.iter().find(|(open, _)| *open == name).map_or(0, |(_, depth)| *depth)
    }

    fn text(&mut self, text: &str) -> ExtractResult<()> {
        if self.dropping() {
            return Ok(());
        }
        if let Some((_, title)) = self.heading.as_mut() {
            title.push_str(text);
            return Ok(());
        }
        if self.pre > 0 { self.builder.push_raw(text) } else { self.builder.push_inline(text) }
    }

    /// Handles a tag; `permalink` when it is an `a` of a permalink class.
    fn tag(&mut self, kind: TagKind, name: &str, self_closing: bool, permalink: bool) -> ExtractResult<()> {
        if kind == TagKind::StartTag && name == "body" {
            // `</head>` is optional: the body ends the head.
            self.dropped.retain(|(open, _)| *open != "head");
        }
        if name == "header" && !self_closing {
            let kept = match kind {
                TagKind::StartTag => !self.dropping() && self.sectioning > 0,
                TagKind::EndTag => self.dropped_depth("header") == 0 && self.kept_headers > 0,
            };
            if kept {
                match kind {
                    TagKind::StartTag => self.kept_headers += 1,
                    TagKind::EndTag => self.kept_headers -= 1,
                }
                return self.builder.line_break();
            }
        }
        if let Some(dropped) = dropped_name(name) {
            if self_closing {
                return Ok(());
            }
            let entry = match self.dropped.iter_mut().find(|(open, _)| *open == dropped) {
                Some(entry) => entry,
                None => {
                    self.dropped.push((dropped, 0));
                    self.dropped.last_mut().expect("just pushed")
                }
            };
            match kind {
                TagKind::StartTag => entry.1 += 1,
                TagKind::EndTag => entry.1 = entry.1.saturating_sub(1),
            }
            return Ok(());
        }
        if name == "a" && !self_closing {
            match kind {
                TagKind::StartTag if permalink && !self.dropping() => self.permalink = true,
                TagKind::StartTag => self.heading_anchor = self.heading.as_ref().map(|(_, title)| title.len()),
                TagKind::EndTag if self.permalink => self.permalink = false,
                TagKind::EndTag => {
                    if let (Some(start), Some((_, title))) = (self.heading_anchor.take(), self.heading.as_mut())
                        && title.get(start..).is_some_and(permalink_glyph)
                    {
                        title.truncate(start);
                    }
                }
            }
            return Ok(());
        }
        if self.dropping() {
            return Ok(());
        }
        if matches!(name, "article" | "main" | "section") && !self_closing {
            match kind {
                TagKind::StartTag => self.sectioning += 1,
                TagKind::EndTag => self.sectioning = self.sectioning.saturating_sub(1),
            }
        }
        let heading =
            name.strip_prefix('h').and_then(|level| level.parse::<u8>().ok()).filter(|level| (1..=6).contains(level));
        match (kind, heading) {
            (TagKind::StartTag, Some(level)) => {
                self.flush_heading()?;
                self.heading = Some((level, String::new()));
            }
            (TagKind::EndTag, Some(_)) => self.flush_heading()?,
            _ if name == "pre" => {
                self.builder.paragraph_break()?;
                match kind {
                    TagKind::StartTag => self.pre += 1,
                    TagKind::EndTag => self.pre = self.pre.saturating_sub(1),
                }
            }
            (TagKind::EndTag, None) if name == "td" || name == "th" => self.builder.push_inline(" | ")?,
            _ if name == "td" || name == "th" => {}
            _ if BLOCKS.contains(&name) => {
                if matches!(name, "p" | "table" | "blockquote" | "section" | "article") {
                    self.builder.paragraph_break()?;
                } else {
                    self.builder.line_break()?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn flush_heading(&mut self) -> ExtractResult<()> {
        self.heading_anchor = None;
        if let Some((level, title)) = self.heading.take() {
            self.builder.heading(level, &title)?;
        }
        Ok(())
    }
}

impl TokenSink for Sink {
    type Handle = ();

    fn process_token(&self, token: Token, _line_number: u64) -> TokenSinkResult<()> {
        let mut state = self.0.borrow_mut();
        if state.error.is_some() {
            return TokenSinkResult::Continue;
        }
        let mut raw = None;
        let outcome = match token {
            Token::CharacterTokens(text) => state.text(&text),
            Token::TagToken(tag) => {
                let name: &str = &tag.name;
                if tag.kind == TagKind::StartTag && !tag.self_closing {
                    raw = match name {
                        "script" => Some(RawKind::ScriptData),
                        "style" | "noscript" | "xmp" | "iframe" | "noembed" | "noframes" => Some(RawKind::Rawtext),
                        "textarea" | "title" => Some(RawKind::Rcdata),
                        _ => None,
                    };
                }
                let permalink = tag.kind == TagKind::StartTag && permalink_anchor(&tag);
                state.tag(tag.kind, name, tag.self_closing, permalink)
            }
            _ => Ok(()),
        };
        if let Err(error) = outcome {
            state.error = Some(error);
        }
        match raw {
            Some(kind) => TokenSinkResult::RawData(kind),
            None => TokenSinkResult::Continue,
        }
    }
}

pub(super) fn extract(html: &str, builder: TextBuilder) -> ExtractResult<Extracted> {
    let sink = Sink(RefCell::new(State {
        builder,
        dropped: Vec::new(),
        sectioning: 0,
        kept_headers: 0,
        heading: None,
        permalink: false,
        heading_anchor: None,
        pre: 0,
        error: None,
    }));
    let tokenizer = Tokenizer::new(sink, Default::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    let mut state = tokenizer.sink.0.into_inner();
    if let Some(error) = state.error {
        return Err(error);
    }
    state.flush_heading()?;
    state.builder.finish(0)
}
