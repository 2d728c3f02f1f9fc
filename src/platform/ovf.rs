//! OVF environment documents (DMTF DSP0243, `http://schemas.dmtf.org/ovf/environment/1`): the
//! XML a VMware host hands the guest in guestinfo `ovfEnv`, whose `PropertySection` carries
//! the vApp properties (`<Property oe:key="guestinfo.ignition.config.data" oe:value="…"/>`).
//!
//! Two operations, each as Ignition does it:
//! - [`properties`] reads every `Property` of the root's `PropertySection`s by the local names
//!   of the element and of its `key`/`value` attributes, whatever their namespace (Go's
//!   `encoding/xml` matches names so); a later property of the same key wins.
//! - [`delete_properties`] removes the `Property` elements whose key is listed, matching
//!   namespaces strictly (root `Environment`, `PropertySection`, `Property` and the `key`
//!   attribute all in the OVF environment namespace), and leaves every other byte of the
//!   document as it was.
//!
//! The reader below is a small, non-validating XML tokenizer: elements, attributes with
//! namespace prefixes, the five predefined entities and character references, comments,
//! processing instructions, CDATA and a DOCTYPE without internal subset. It needs no XML crate
//! for two attributes of one element.

use std::collections::HashMap;

use anyhow::{Result, bail};

/// The OVF environment namespace.
pub const XMLNS: &str = "http://schemas.dmtf.org/ovf/environment/1";

/// The namespace of the `xml:` prefix.
const XML_PREFIX_NS: &str = "http://www.w3.org/XML/1998/namespace";

/// One element of the document, with the byte span of its whole markup (start tag to end
/// tag), its depth, namespace-resolved name and attributes.
#[derive(Debug)]
struct Element {
    depth: usize,
    /// Index of the parent in the element list (None: the root).
    parent: Option<usize>,
    ns: Option<String>,
    local: String,
    /// (namespace, local name, value): unprefixed attributes have no namespace.
    attrs: Vec<(Option<String>, String, String)>,
    start: usize,
    end: usize,
}

/// The properties of an OVF environment: key → value.
pub fn properties(doc: &str) -> Result<HashMap<String, String>> {
    let els = parse(doc)?;
    let mut props = HashMap::new();
    for e in &els {
        if e.depth != 2 || e.local != "Property" {
            continue;
        }
        let parent = &els[e.parent.expect("depth 2 has a parent")];
        if parent.local != "PropertySection" {
            continue;
        }
        let attr = |name: &str| {
            e.attrs
                .iter()
                .find(|(_, l, _)| l == name)
                .map(|(_, _, v)| v.clone())
                .unwrap_or_default()
        };
        props.insert(attr("key"), attr("value"));
    }
    Ok(props)
}

/// `doc` without the `Property` elements whose `key` is one of `keys` (namespaces checked
/// strictly, see the module documentation), and whether any was removed. Nothing removed:
/// `doc` itself, byte for byte.
pub fn delete_properties(doc: &str, keys: &[&str]) -> Result<(String, bool)> {
    let els = parse(doc)?;
    let in_ns = |e: &Element| e.ns.as_deref() == Some(XMLNS);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for e in &els {
        if e.depth != 2 || e.local != "Property" || !in_ns(e) {
            continue;
        }
        let section = &els[e.parent.expect("depth 2 has a parent")];
        let root = &els[section.parent.expect("depth 1 has a parent")];
        if section.local != "PropertySection"
            || !in_ns(section)
            || root.local != "Environment"
            || !in_ns(root)
        {
            continue;
        }
        let key = e
            .attrs
            .iter()
            .find(|(ns, l, _)| ns.as_deref() == Some(XMLNS) && l == "key");
        if key.is_some_and(|(_, _, v)| keys.contains(&v.as_str())) {
            spans.push((e.start, e.end));
        }
    }
    if spans.is_empty() {
        return Ok((doc.to_string(), false));
    }
    let mut out = String::with_capacity(doc.len());
    let mut at = 0;
    for (s, e) in spans {
        out.push_str(&doc[at..s]);
        at = e;
    }
    out.push_str(&doc[at..]);
    Ok((out, true))
}

/// The elements of the document's root element, in document order. Anything after the root
/// element ends is ignored (as Go's `xml.Unmarshal` does).
fn parse(doc: &str) -> Result<Vec<Element>> {
    let b = doc.as_bytes();
    let mut i = 0;
    let mut els: Vec<Element> = Vec::new();
    // Open elements: (index in els, qualified name, namespace bindings it declared).
    let mut open: Vec<(usize, String)> = Vec::new();
    let mut scopes: Vec<HashMap<String, String>> = vec![HashMap::from([(
        "xml".to_string(),
        XML_PREFIX_NS.to_string(),
    )])];
    let mut seen_root = false;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &doc[i..];
        if rest.starts_with("<!--") {
            i += 4 + find(&doc[i + 4..], "-->", i, "an unterminated comment")? + 3;
        } else if rest.starts_with("<![CDATA[") {
            i += 9 + find(&doc[i + 9..], "]]>", i, "an unterminated CDATA section")? + 3;
        } else if rest.starts_with("<?") {
            i +=
                2 + find(
                    &doc[i + 2..],
                    "?>",
                    i,
                    "an unterminated processing instruction",
                )? + 2;
        } else if let Some(decl) = rest.strip_prefix("<!") {
            let close = find(rest, ">", i, "an unterminated declaration")?;
            if decl.starts_with("DOCTYPE") && rest[..close].contains('[') {
                bail!("XML at byte {i}: a DOCTYPE with an internal subset is not supported");
            }
            i += close + 1;
        } else if rest.starts_with("</") {
            let close = find(rest, ">", i, "an unterminated end tag")?;
            let name = rest[2..close].trim();
            let Some((idx, qname)) = open.pop() else {
                bail!("XML at byte {i}: end tag </{name}> without a start tag");
            };
            if name != qname {
                bail!("XML at byte {i}: end tag </{name}> does not match <{qname}>");
            }
            scopes.pop();
            i += close + 1;
            els[idx].end = i;
            if open.is_empty() {
                return Ok(els);
            }
        } else {
            if seen_root && open.is_empty() {
                bail!("XML at byte {i}: a second root element");
            }
            seen_root = true;
            let (tag, len) = start_tag(doc, i)?;
            let mut scope = scopes.last().expect("the xml scope").clone();
            for (name, value) in &tag.attrs {
                if name == "xmlns" {
                    scope.insert(String::new(), value.clone());
                } else if let Some(p) = name.strip_prefix("xmlns:") {
                    scope.insert(p.to_string(), value.clone());
                }
            }
            let resolve = |qname: &str, element: bool| -> Result<(Option<String>, String)> {
                match qname.split_once(':') {
                    Some((p, l)) => match scope.get(p) {
                        Some(ns) => Ok((Some(ns.clone()), l.to_string())),
                        None => bail!("XML at byte {i}: undeclared namespace prefix {p:?}"),
                    },
                    None if element => Ok((
                        scope.get("").filter(|s| !s.is_empty()).cloned(),
                        qname.to_string(),
                    )),
                    None => Ok((None, qname.to_string())),
                }
            };
            let (ns, local) = resolve(&tag.name, true)?;
            let mut attrs = Vec::new();
            for (name, value) in &tag.attrs {
                if name == "xmlns" || name.starts_with("xmlns:") {
                    continue;
                }
                let (ans, alocal) = resolve(name, false)?;
                attrs.push((ans, alocal, value.clone()));
            }
            let idx = els.len();
            els.push(Element {
                depth: open.len(),
                parent: open.last().map(|(p, _)| *p),
                ns,
                local,
                attrs,
                start: i,
                end: i + len,
            });
            i += len;
            if tag.empty {
                if open.is_empty() {
                    return Ok(els);
                }
            } else {
                open.push((idx, tag.name));
                scopes.push(scope);
            }
        }
    }
    match open.last() {
        Some((_, name)) => bail!("XML: element <{name}> is not closed"),
        None => bail!("XML: no root element"),
    }
}

/// Offset of `pat` in `s`, or an error at byte `at` saying `what`.
fn find(s: &str, pat: &str, at: usize, what: &str) -> Result<usize> {
    match s.find(pat) {
        Some(k) => Ok(k),
        None => bail!("XML at byte {at}: {what}"),
    }
}

struct StartTag {
    name: String,
    attrs: Vec<(String, String)>,
    empty: bool,
}

fn is_name_char(c: u8) -> bool {
    !c.is_ascii_whitespace() && !matches!(c, b'=' | b'>' | b'/' | b'<' | b'"' | b'\'')
}

/// The start tag at `doc[at..]` (which begins with `<`) and its length.
fn start_tag(doc: &str, at: usize) -> Result<(StartTag, usize)> {
    let b = doc.as_bytes();
    let mut i = at + 1;
    let name_end = (i..b.len())
        .find(|&k| !is_name_char(b[k]))
        .unwrap_or(b.len());
    if name_end == i {
        bail!("XML at byte {at}: a tag without a name");
    }
    let name = doc[i..name_end].to_string();
    i = name_end;
    let mut attrs = Vec::new();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        match b.get(i) {
            None => bail!("XML at byte {at}: an unterminated start tag <{name}"),
            Some(b'>') => {
                let tag = StartTag {
                    name,
                    attrs,
                    empty: false,
                };
                return Ok((tag, i + 1 - at));
            }
            Some(b'/') if b.get(i + 1) == Some(&b'>') => {
                let tag = StartTag {
                    name,
                    attrs,
                    empty: true,
                };
                return Ok((tag, i + 2 - at));
            }
            Some(_) => {}
        }
        let an_start = i;
        while i < b.len() && is_name_char(b[i]) {
            i += 1;
        }
        if i == an_start {
            bail!("XML at byte {i}: unexpected {:?} in <{name}>", b[i] as char);
        }
        let aname = doc[an_start..i].to_string();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) != Some(&b'=') {
            bail!("XML at byte {i}: attribute {aname} of <{name}> has no value");
        }
        i += 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let quote = match b.get(i) {
            Some(&q @ (b'"' | b'\'')) => q,
            _ => bail!("XML at byte {i}: the value of attribute {aname} is not quoted"),
        };
        let v_start = i + 1;
        let Some(len) = b[v_start..].iter().position(|&c| c == quote) else {
            bail!("XML at byte {i}: the value of attribute {aname} is not terminated");
        };
        let raw = &doc[v_start..v_start + len];
        if raw.contains('<') {
            bail!("XML at byte {v_start}: '<' in the value of attribute {aname}");
        }
        attrs.push((aname, unescape(raw, v_start)?));
        i = v_start + len + 1;
    }
}

/// `s` with entity and character references replaced; `at` is its offset, for errors.
fn unescape(s: &str, at: usize) -> Result<String> {
    if !s.contains('&') {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(k) = rest.find('&') {
        out.push_str(&rest[..k]);
        let Some(semi) = rest[k..].find(';') else {
            bail!(
                "XML at byte {}: '&' without ';'",
                at + s.len() - rest.len() + k
            );
        };
        let name = &rest[k + 1..k + semi];
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(h) = name.strip_prefix("#x") {
                    u32::from_str_radix(h, 16).ok()
                } else if let Some(d) = name.strip_prefix('#') {
                    d.parse().ok()
                } else {
                    None
                };
                match code.and_then(char::from_u32) {
                    Some(c) => c,
                    None => bail!("XML at byte {at}: unknown reference &{name};"),
                }
            }
        };
        out.push(c);
        rest = &rest[k + semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The OVF environments of Ignition's own tests (vSphere, vApprun, and two made to check
    // namespace handling when deleting).
    const VSPHERE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Environment
     xmlns="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:ve="http://www.vmware.com/schema/ovfenv"
     oe:id=""
     ve:vCenterId="vm-12345">
   <PlatformSection>
      <Kind>VMware ESXi</Kind>
      <Version>5.5.0</Version>
      <Vendor>VMware, Inc.</Vendor>
      <Locale>en</Locale>
   </PlatformSection>
   <PropertySection>
         <Property oe:key="foo" oe:value="42"/>
         <Property oe:key="bar" oe:value="0"/>
   </PropertySection>
   <ve:EthernetAdapterSection>
      <ve:Adapter ve:mac="00:00:00:00:00:00" ve:network="foo" ve:unitNumber="7"/>
   </ve:EthernetAdapterSection>
</Environment>"#;

    const VAPPRUN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"
     oe:id="CoreOS-vmw">
   <PlatformSection>
      <Kind>vapprun</Kind>
      <Version>1.0</Version>
      <Vendor>VMware, Inc.</Vendor>
      <Locale>en_US</Locale>
   </PlatformSection>
   <PropertySection>
      <Property oe:key="foo" oe:value="42"/>
      <Property oe:key="bar" oe:value="0"/>
      <Property oe:key="guestinfo.user_data.url" oe:value="https://example.com/raw/plop.yaml"/>
      <Property oe:key="guestinfo.user_data.doc" oe:value=""/>
   </PropertySection>
</Environment>"#;

    const DELETE_SIMPLE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:a="http://schemas.dmtf.org/ovf/environment/1">
   <Invalid>
     <InvalidKey>garbage!</InvalidKey>
   </Invalid>
   <PropertySection>
      <!-- XML attributes don't default to the default namespace -->
      <Property a:key="guestinfo.ignition.config.data" value="remove"/>
      <Property a:key="guestinfo.ignition.config.data.encoding" value="remove"/>
   </PropertySection>
</Environment>"#;

    const DELETE_COMPLEX: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1" xmlns:ex="http://example.com/xmlns" oe:id="ignition-vmw">
   <PlatformSection>
      <Kind>vapprun</Kind>
   </PlatformSection>
   <Invalid>
     <InvalidKey>garbage!</InvalidKey>
   </Invalid>
   <PropertySection>
      <Property ex:key="guestinfo.ignition.config.data.encoding" oe:value="keep"/>
      <ex:Property oe:key="guestinfo.ignition.config.data.encoding" oe:value="keep"/>
      <Property oe:key="guestinfo.ignition.config.data" oe:value="remove"/>
      <Property oe:key="guestinfo.ignition.config.data.encoding" oe:value="remove"></Property>
      <Property oe:key="bar" oe:value="0"/>
   </PropertySection>
   <ex:PropertySection>
      <Property oe:key="guestinfo.ignition.config.data" oe:value="keep"/>
      <Property oe:key="guestinfo.ignition.config.data.encoding" oe:value="keep"/>
   </ex:PropertySection>
</Environment>"#;

    const KEYS: &[&str] = &[
        "guestinfo.ignition.config.data",
        "guestinfo.ignition.config.data.encoding",
    ];

    #[test]
    fn properties_of_vsphere_and_vapprun_environments() {
        for doc in [VSPHERE, VAPPRUN] {
            let p = properties(doc).unwrap();
            assert_eq!(p["foo"], "42");
            assert_eq!(p["bar"], "0");
        }
        let p = properties(VAPPRUN).unwrap();
        assert_eq!(
            p["guestinfo.user_data.url"],
            "https://example.com/raw/plop.yaml"
        );
        assert_eq!(p["guestinfo.user_data.doc"], "");
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn values_are_unescaped_and_later_properties_win() {
        let doc = r#"<Environment xmlns:oe="urn:x"><PropertySection>
            <Property oe:key="k" oe:value="first"/>
            <Property oe:key='k' oe:value='{"a":"&lt;&amp;&gt;&quot;&apos;&#65;&#x42;"}'/>
            </PropertySection><Other><PropertySection><Property oe:key="deep" oe:value="no"/></PropertySection></Other></Environment>"#;
        let p = properties(doc).unwrap();
        assert_eq!(p["k"], r#"{"a":"<&>"'AB"}"#);
        assert!(
            !p.contains_key("deep"),
            "only the root's PropertySection counts"
        );
    }

    #[test]
    fn trailing_garbage_is_ignored_like_go() {
        let p = properties(&format!("{VSPHERE}garbage")).unwrap();
        assert_eq!(p["foo"], "42");
    }

    #[test]
    fn malformed_documents_are_errors() {
        for (doc, want) in [
            ("", "no root element"),
            ("<Environment><PropertySection>", "is not closed"),
            ("<Environment></Other>", "does not match"),
            ("<Environment a=b/>", "not quoted"),
            ("<Environment a=\"x/>", "not terminated"),
            (
                "<Environment><p:Property/></Environment>",
                "undeclared namespace prefix",
            ),
            ("<Environment a=\"&bogus;\"/>", "unknown reference"),
            ("<!-- open", "unterminated comment"),
        ] {
            let e = format!("{:#}", properties(doc).unwrap_err());
            assert!(e.contains(want), "{doc:?}: {e}");
        }
    }

    /// Ignition's expectation: each line with "remove" loses its element, keeping the
    /// indentation; everything else is unchanged.
    fn expected_after_delete(doc: &str) -> (String, bool) {
        let mut deleted = false;
        let lines: Vec<String> = doc
            .split('\n')
            .map(|line| {
                if line.contains("remove") {
                    deleted = true;
                    let s = line.find(['<', '>']).unwrap();
                    let e = line.rfind(['<', '>']).unwrap();
                    format!("{}{}", &line[..s], &line[e + 1..])
                } else {
                    line.to_string()
                }
            })
            .collect();
        (lines.join("\n"), deleted)
    }

    #[test]
    fn deleting_properties_checks_namespaces_and_keeps_the_rest() {
        for doc in [DELETE_SIMPLE, DELETE_COMPLEX, VAPPRUN] {
            let got = delete_properties(doc, KEYS).unwrap();
            assert_eq!(got, expected_after_delete(doc), "{doc}");
        }
        // The result is still an OVF environment with the other properties.
        let (pruned, _) = delete_properties(DELETE_COMPLEX, KEYS).unwrap();
        let p = properties(&pruned).unwrap();
        assert_eq!(p["bar"], "0");
    }
}
