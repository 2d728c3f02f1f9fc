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
//! The XML is read by `roxmltree` (adopted in place of a hand-written tokenizer: a small,
//! dependency-free, well-kept parser that resolves namespaces, entities and CDATA and gives
//! each element's byte range, which is all [`delete_properties`] needs; measured, it adds
//! 36,896 bytes to the 5.2 MB static binary, 0.7%). As Go's
//! `xml.Unmarshal`, anything after the root element is ignored. A DOCTYPE is accepted
//! (roxmltree bounds entity expansion); attribute values are normalized as XML says
//! (a literal tab or newline becomes a space; `&#10;` stays a newline).

use std::collections::HashMap;
use std::ops::Range;

use anyhow::{Result, anyhow};
use roxmltree::{Document, Node, ParsingOptions};

/// The OVF environment namespace.
pub const XMLNS: &str = "http://schemas.dmtf.org/ovf/environment/1";

/// The properties of an OVF environment: key → value.
pub fn properties(doc: &str) -> Result<HashMap<String, String>> {
    let doc = parse(doc)?;
    let mut props = HashMap::new();
    for e in sections(&doc, |n| n.tag_name().name() == "PropertySection")
        .flat_map(|s| s.children())
        .filter(|e| e.is_element() && e.tag_name().name() == "Property")
    {
        let attr = |name: &str| {
            e.attributes()
                .find(|a| a.name() == name)
                .map(|a| a.value().to_string())
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
    let parsed = parse(doc)?;
    let in_ns = |n: &Node| n.tag_name().namespace() == Some(XMLNS);
    let mut spans: Vec<Range<usize>> = Vec::new();
    if parsed.root_element().tag_name().name() == "Environment" && in_ns(&parsed.root_element()) {
        let props = sections(&parsed, |n| {
            n.tag_name().name() == "PropertySection" && in_ns(n)
        })
        .flat_map(|s| s.children())
        .filter(|e| e.is_element() && e.tag_name().name() == "Property" && in_ns(e));
        for e in props {
            let key = e
                .attributes()
                .find(|a| a.namespace() == Some(XMLNS) && a.name() == "key");
            if key.is_some_and(|a| keys.contains(&a.value())) {
                spans.push(e.range());
            }
        }
    }
    if spans.is_empty() {
        return Ok((doc.to_string(), false));
    }
    let mut out = String::with_capacity(doc.len());
    let mut at = 0;
    for r in spans {
        out.push_str(&doc[at..r.start]);
        at = r.end;
    }
    out.push_str(&doc[at..]);
    Ok((out, true))
}

/// The children of the root element that `is_section` accepts.
fn sections<'a, 'i>(
    doc: &'a Document<'i>,
    is_section: impl Fn(&Node) -> bool + 'a,
) -> impl Iterator<Item = Node<'a, 'i>> {
    doc.root_element()
        .children()
        .filter(move |n| n.is_element() && is_section(n))
}

/// The document; anything after its root element is ignored, as Go's `xml.Unmarshal` does:
/// when the parser stops at an error, the text before the error is tried on its own.
fn parse(doc: &str) -> Result<Document<'_>> {
    let opts = || ParsingOptions {
        allow_dtd: true,
        ..ParsingOptions::default()
    };
    match Document::parse_with_options(doc, opts()) {
        Ok(d) => Ok(d),
        Err(e) => {
            let at = offset(doc, e.pos());
            if at > 0
                && let Ok(d) = Document::parse_with_options(&doc[..at], opts())
            {
                return Ok(d);
            }
            Err(anyhow!("XML: {e}"))
        }
    }
}

/// The byte offset of a parser position (1-based row, and column in characters).
fn offset(doc: &str, pos: roxmltree::TextPos) -> usize {
    let Some(line_start) = (if pos.row <= 1 {
        Some(0)
    } else {
        doc.match_indices('\n')
            .nth(pos.row as usize - 2)
            .map(|(i, _)| i + 1)
    }) else {
        return 0;
    };
    let line = &doc[line_start..];
    let col = line
        .char_indices()
        .nth((pos.col as usize).saturating_sub(1))
        .map_or(line.len(), |(i, _)| i);
    line_start + col
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
        // roxmltree's wording.
        for (doc, want) in [
            ("", "does not have a root node"),
            ("<Environment><PropertySection>", "opened but never closed"),
            (
                "<Environment></Other>",
                "expected 'Environment' tag, not 'Other'",
            ),
            ("<Environment a=b/>", "expected a quote"),
            ("<Environment a=\"x/>", "unexpected end of stream"),
            (
                "<Environment><p:Property/></Environment>",
                "unknown namespace prefix 'p'",
            ),
            (
                "<Environment a=\"&bogus;\"/>",
                "unknown entity reference 'bogus'",
            ),
            ("<!-- open", "expected '-->'"),
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

    /// As vSphere writes it, with another prefix for the OVF namespace, CRLF line ends, a
    /// comment, and a JSON config whose quotes and ampersand are entities.
    const OTHER_PREFIX: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n\
<ovfenv:Environment xmlns:ovfenv=\"http://schemas.dmtf.org/ovf/environment/1\" \
xmlns:ve=\"http://www.vmware.com/schema/ovfenv\" ovfenv:id=\"\" ve:vCenterId=\"vm-7\">\r\n\
   <ovfenv:PropertySection>\r\n\
      <!-- <ovfenv:Property ovfenv:key=\"guestinfo.ignition.config.data\" ovfenv:value=\"no\"/> -->\r\n\
      <ovfenv:Property ovfenv:key=\"guestinfo.ignition.config.data\" \
ovfenv:value=\"{&quot;ignition&quot;:{&quot;version&quot;:&quot;3.4.0&quot;},&quot;x&quot;:&quot;a&amp;b &lt;c&gt;&quot;}\"/>\r\n\
      <ovfenv:Property ovfenv:value=\"\" ovfenv:key=\"guestinfo.ignition.config.data.encoding\"/>\r\n\
      <ovfenv:Property ovfenv:key=\"hostname\" ovfenv:value=\"h&#x2d;1\"/>\r\n\
   </ovfenv:PropertySection>\r\n\
</ovfenv:Environment>\r\n";

    #[test]
    fn another_namespace_prefix_and_entities_in_values() {
        let p = properties(OTHER_PREFIX).unwrap();
        assert_eq!(
            p["guestinfo.ignition.config.data"],
            r#"{"ignition":{"version":"3.4.0"},"x":"a&b <c>"}"#
        );
        // Attribute order does not matter; the commented-out property is not one.
        assert_eq!(p["guestinfo.ignition.config.data.encoding"], "");
        assert_eq!(p["hostname"], "h-1");
        assert_eq!(p.len(), 3);
        // The prefix is bound to the OVF namespace: deleting matches, and only the two
        // elements go (the comment, the CRLFs and the other property stay as they were).
        let (pruned, removed) = delete_properties(OTHER_PREFIX, KEYS).unwrap();
        assert!(removed);
        let want = OTHER_PREFIX
            .split("\r\n")
            .map(|l| match l.find("<ovfenv:Property ovfenv:") {
                Some(i) if l.contains("guestinfo.") && !l.starts_with("<!--") => &l[..i],
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\r\n");
        assert_eq!(pruned, want);
        let p = properties(&pruned).unwrap();
        assert_eq!(p.len(), 1, "{p:?}");
    }

    #[test]
    fn cdata_and_a_doctype_do_not_disturb() {
        let doc = r#"<?xml version="1.0"?>
<!DOCTYPE Environment>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1">
  <PropertySection><![CDATA[ <Property oe:key="k" oe:value="cdata"/> ]]>
    <Property oe:key="k" oe:value="v"/>
  </PropertySection>
</Environment>"#;
        let p = properties(doc).unwrap();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p["k"], "v");
    }
}
