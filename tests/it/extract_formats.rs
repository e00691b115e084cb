//! Extraction of DOCX, HTML and Markdown as real producers write them (issue 60): Word's text
//! boxes, Sphinx and MkDocs headings, Markdown front matter.

use warrant::domain::Location;
use warrant::extract::samples;
use warrant::extract::{DOCX_TYPE, ExtractLimits, Extracted, extract};

fn limits() -> ExtractLimits {
    ExtractLimits::default()
}

fn section_at(extracted: &Extracted, needle: &str) -> Location {
    let byte = extracted.text.find(needle).expect("needle in text");
    let start = extracted.text[..byte].chars().count();
    extracted.layout.locate(start, start + needle.chars().count())
}

/// A DOCX whose `word/document.xml` body is `body` (Word's namespaces declared).
fn docx_of_body(body: &str) -> Vec<u8> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\
         <w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\" \
         xmlns:mc=\"http://schemas.openxmlformats.org/markup-compatibility/2006\" \
         xmlns:wp=\"http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing\" \
         xmlns:a=\"http://schemas.openxmlformats.org/drawingml/2006/main\" \
         xmlns:wps=\"http://schemas.microsoft.com/office/word/2010/wordprocessingShape\" \
         xmlns:v=\"urn:schemas-microsoft-com:vml\" mc:Ignorable=\"wps\"><w:body>{body}</w:body></w:document>"
    );
    samples::zip(&[("word/document.xml", xml.as_bytes())])
}

/// A run anchoring a text box holding `text`, as Word writes it: the DrawingML shape in
/// `mc:Choice`, the same box again as VML in `mc:Fallback`.
fn text_box_run(text: &str) -> String {
    let content = format!("<w:txbxContent><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:txbxContent>");
    format!(
        "<w:r><mc:AlternateContent>\
         <mc:Choice Requires=\"wps\"><w:drawing><wp:anchor><a:graphic><a:graphicData>\
         <wps:wsp><wps:txbx>{content}</wps:txbx></wps:wsp></a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>\
         <mc:Fallback><w:pict><v:shape><v:textbox>{content}</v:textbox></v:shape></w:pict></mc:Fallback>\
         </mc:AlternateContent></w:r>"
    )
}

/// Regression (issue 60, item 2): the paragraph anchoring a text box lost its own text around
/// the anchor, and the box text came out twice (from `mc:Choice` and from `mc:Fallback`).
#[test]
fn a_docx_paragraph_anchoring_a_text_box_keeps_its_text_and_the_box_text_comes_once() {
    let body = format!(
        "<w:p><w:pPr><w:pStyle w:val=\"Heading1\"/></w:pPr><w:r><w:t>Plant</w:t></w:r></w:p>\
         <w:p><w:r><w:t xml:space=\"preserve\">Before the box. </w:t></w:r>{}\
         <w:r><w:t xml:space=\"preserve\"> After the box.</w:t></w:r></w:p>\
         <w:p><w:r><w:t>Next paragraph.</w:t></w:r></w:p>",
        text_box_run("Box fact 42.")
    );
    let extracted = extract(&docx_of_body(&body), DOCX_TYPE, &limits()).expect("docx");
    assert_eq!(extracted.text, "Plant\n\nBefore the box. After the box.\n\nBox fact 42.\n\nNext paragraph.");
    assert_eq!(extracted.text.matches("Box fact 42.").count(), 1);
    assert_eq!(section_at(&extracted, "Box fact").section, vec!["Plant"]);
}

/// A box anchored in a table cell comes after the table; a box whose markup has no `mc:Choice`
/// (VML only, as older Word wrote it) is read once too.
#[test]
fn a_docx_text_box_in_a_table_cell_or_without_a_choice_is_read_once() {
    let vml_only = "<w:r><w:pict><v:shape><v:textbox><w:txbxContent><w:p><w:r><w:t>Old box.</w:t></w:r></w:p>\
                    </w:txbxContent></v:textbox></v:shape></w:pict></w:r>";
    let body = format!(
        "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>City</w:t></w:r>{}</w:p></w:tc><w:tc><w:p><w:r><w:t>Limit</w:t></w:r></w:p></w:tc></w:tr></w:tbl>\
         <w:p><w:r><w:t xml:space=\"preserve\">Legacy </w:t></w:r>{vml_only}<w:r><w:t>anchor.</w:t></w:r></w:p>",
        text_box_run("Cell box.")
    );
    let extracted = extract(&docx_of_body(&body), DOCX_TYPE, &limits()).expect("docx");
    assert_eq!(extracted.text, "City | Limit\n\nCell box.\n\nLegacy anchor.\n\nOld box.");
}

/// Paragraphs nested past the kept depth (boxes in boxes, or a hostile file) are read into the
/// innermost kept one: no text is lost and the stack stays small.
#[test]
fn a_docx_of_a_hundred_thousand_nested_paragraphs_keeps_all_their_text() {
    let depth = 100_000;
    let body = format!("{}{}", "<w:p><w:r><w:t>level</w:t></w:r>".repeat(depth), "</w:p>".repeat(depth));
    let extracted = extract(&docx_of_body(&body), DOCX_TYPE, &limits()).expect("nested docx");
    assert_eq!(extracted.text.matches("level").count(), depth);
    assert!(extracted.text.starts_with("level\n\nlevel\n\n"), "{:?}", &extracted.text[..40]);
}

/// Regression (issue 60, item 5): a heading inside `<article><header>` was dropped from the
/// section path with the whole `header` (taken for the site's banner). A page-level header
/// stays boilerplate.
#[test]
fn an_html_heading_inside_an_article_header_opens_its_section() {
    let html = r#"<!doctype html><html><body>
<header class="site"><a href="/">Home</a><h1>Site name</h1></header>
<main><article>
<header><h1>Turbine report</h1><p class="byline">By the operations team</p></header>
<p>The Halvard plant shipped 5,812 turbines in 2031.</p>
<section><header><h2>Outlook</h2></header><p>Orders doubled.</p></section>
</article></main>
<footer>Copyright</footer>
</body></html>"#;
    let extracted = extract(html.as_bytes(), "text/html", &limits()).expect("html");
    assert_eq!(
        extracted.text,
        "Turbine report\n\nBy the operations team\n\nThe Halvard plant shipped 5,812 turbines in 2031.\n\n\
         Outlook\n\nOrders doubled."
    );
    assert_eq!(section_at(&extracted, "Halvard").section, vec!["Turbine report"]);
    assert_eq!(section_at(&extracted, "Orders").section, vec!["Turbine report", "Outlook"]);
}

/// Regression (issue 60, item 6): the permalink anchors Sphinx, MkDocs and Docusaurus put in
/// headings (and Sphinx after API signatures and captions) stayed in section names and text.
#[test]
fn html_permalink_anchors_are_dropped_from_section_names_and_text() {
    let html = "<!doctype html><html><body><div class=\"body\" role=\"main\">\
<section id=\"install\">\n<h2>Install<a class=\"headerlink\" href=\"#install\" title=\"Link to this heading\">¶</a></h2>\n\
<p>Run the installer.</p>\n\
<dl class=\"py function\"><dt class=\"sig sig-object py\" id=\"warrant.frobnicate\">\
<span class=\"sig-name descname\">frobnicate</span>()<a class=\"headerlink\" href=\"#warrant.frobnicate\" \
title=\"Link to this definition\">¶</a></dt><dd><p>Frobnicates.</p></dd></dl>\n\
</section>\n\
<section id=\"limits\"><h2>Limits <a href=\"#limits\">§</a></h2><p>Ten per day.</p></section>\n\
<section id=\"usage\"><h3>Usage<a href=\"#usage\" class=\"hash-link\" aria-label=\"Direct link to Usage\">\u{200b}</a></h3>\
<p>Call it daily.</p></section>\n\
<h2>Links <a href=\"#links\">\u{f0c1}</a></h2><p>See <a href=\"https://example.com\">the site</a>.</p>\n\
</div></body></html>";
    let extracted = extract(html.as_bytes(), "text/html", &limits()).expect("html");
    assert_eq!(section_at(&extracted, "installer").section, vec!["Install"]);
    assert_eq!(section_at(&extracted, "Ten per day").section, vec!["Limits"]);
    assert_eq!(section_at(&extracted, "daily").section, vec!["Limits", "Usage"]);
    assert_eq!(section_at(&extracted, "the site").section, vec!["Links"]);
    assert_eq!(
        extracted.text,
        "Install\n\nRun the installer.\n\nfrobnicate()\n\nFrobnicates.\n\nLimits\n\nTen per day.\n\n\
         Usage\n\nCall it daily.\n\nLinks\n\nSee the site."
    );
}

/// Regression (issue 60, item 7): YAML front matter became a section titled "title: … owner:
/// …". It is the document's metadata: out of the text and the sections, its `title` the title.
#[test]
fn markdown_front_matter_is_metadata_not_text() {
    let markdown = "---\ntitle: \"Turbine report\"\nowner: operations\ntags: [plants]\n---\n\n# Overview\n\n\
                    The Halvard plant shipped 5,812 turbines.\n";
    let extracted = extract(markdown.as_bytes(), "text/markdown", &limits()).expect("markdown");
    assert_eq!(extracted.text, "Overview\n\nThe Halvard plant shipped 5,812 turbines.");
    assert_eq!(section_at(&extracted, "5,812").section, vec!["Overview"]);
    assert!(extracted.layout.sections.iter().all(|span| span.path.len() == 1), "{:?}", extracted.layout);
    assert_eq!(extracted.title.as_deref(), Some("Turbine report"));
    // TOML front matter (Hugo, Zola), and a title-less block: metadata all the same.
    let toml = "+++\ntitle = 'Install guide'\ndraft = false\n+++\nRun the installer.\n";
    let extracted = extract(toml.as_bytes(), "text/markdown", &limits()).expect("toml");
    assert_eq!((extracted.text.as_str(), extracted.title.as_deref()), ("Run the installer.", Some("Install guide")));
    let untitled = "---\nowner: ops # the team\n...\nBody.\n";
    let extracted = extract(untitled.as_bytes(), "text/markdown", &limits()).expect("untitled");
    assert_eq!((extracted.text.as_str(), extracted.title), ("Body.", None));
}

/// Only a block at the very start is front matter: text between two rules later on, or a
/// document opening with a rule it never closes, is text.
#[test]
fn markdown_rules_after_the_start_are_not_front_matter() {
    let markdown = "Intro.\n\n---\ntitle: between the rules\n\n---\n\nAfter.\n";
    let extracted = extract(markdown.as_bytes(), "text/markdown", &limits()).expect("markdown");
    assert_eq!(extracted.text, "Intro.\n\ntitle: between the rules\n\nAfter.");
    assert_eq!(extracted.title, None);
    let unclosed = "---\ntitle: never closed\n\nText.\n";
    let extracted = extract(unclosed.as_bytes(), "text/markdown", &limits()).expect("unclosed");
    assert_eq!(extracted.text, "title: never closed\n\nText.");
    assert_eq!(extracted.title, None);
}

/// The title of a document uploaded as a file with no `title` field: its front matter's, else
/// its file name; a `title` field wins over both.
#[actix_web::test]
async fn an_uploaded_markdown_file_is_titled_by_its_front_matter_unless_the_upload_names_a_title() {
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use warrant::http::auth::{Claims, mint_hs256};

    let secret = "test-secret-for-front-matter";
    let mut settings = warrant::config::Settings::defaults();
    settings.auth.hs256_secret = secret.into();
    settings.embedder.dim = 64;
    let providers = super::support::hashed_providers(&settings, None);
    let state = super::support::demo_state(std::sync::Arc::new(settings), providers).await;
    let service = init_service(warrant::http::server::app(state)).await;
    let token = |sub: &str, roles: Vec<String>| {
        let claims = Claims {
            sub: sub.into(),
            tenant: "docs".into(),
            groups: vec!["staff".into()],
            roles,
            exp: 4_000_000_000,
            iss: None,
            aud: None,
        };
        mint_hs256(secret, &claims).expect("token")
    };
    let titled = b"---\ntitle: Turbine report\nowner: operations\n---\n# Overview\n\nShipped 5,812 turbines.\n";
    let boundary = "front-matter-boundary";
    let mut body = Vec::new();
    let parts: [(&str, Option<&str>, &[u8]); 5] = [
        ("file", Some("report.md"), titled),
        ("title", None, b"Chosen title"),
        ("file", Some("chosen.md"), titled),
        ("file", Some("plain.md"), b"# Overview\n\nNo front matter.\n"),
        ("groups", None, b"staff"),
    ];
    for (name, file_name, bytes) in parts {
        let file = file_name.map(|file| format!("; filename=\"{file}\"")).unwrap_or_default();
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let upload = TestRequest::post()
        .uri("/v1/admin/files")
        .insert_header(("authorization", format!("Bearer {}", token("root", vec!["admin".into()]))))
        .insert_header(("content-type", format!("multipart/form-data; boundary={boundary}")))
        .set_payload(body)
        .to_request();
    let response = call_service(&service, upload).await;
    let status = response.status().as_u16();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&read_body(response).await));
    let reader = token("ann", Vec::new());
    for (doc_id, title) in [("report.md", "Turbine report"), ("chosen.md", "Chosen title"), ("plain.md", "plain.md")] {
        let request = TestRequest::get()
            .uri(&format!("/v1/documents/{doc_id}"))
            .insert_header(("authorization", format!("Bearer {reader}")))
            .to_request();
        let document: serde_json::Value =
            serde_json::from_slice(&read_body(call_service(&service, request).await).await).expect("a document");
        assert_eq!(document["title"], title, "{document}");
        let text = document["chunks"][0]["text"].as_str().unwrap_or_default();
        assert!(text.starts_with("Overview") && !text.contains("owner"), "{text:?}");
    }
}
