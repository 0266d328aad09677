//! Header value templates: `${secret:NAME}`, `${sandbox.id}`, `${sandbox.label.KEY}`,
//! nested as in `${secret:token-${sandbox.label.team}}`. Any `$` not followed by `{` is
//! itself.

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    SandboxId,
    Label(Template),
    Secret(Template),
}

/// What a template is expanded with.
pub trait TemplateContext {
    fn sandbox_id(&self) -> &str;
    fn label(&self, key: &str) -> Option<&str>;
    /// A secret's value (None: no such secret).
    fn secret(&self, name: &str) -> Option<String>;
}

/// Why a template could not be expanded. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    MissingSecret(String),
    MissingLabel(String),
    /// A nested expansion made a name that is no valid secret name.
    BadSecretName(String),
}

impl std::fmt::Display for ExpandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpandError::MissingSecret(n) => write!(f, "secret {n:?} does not exist"),
            ExpandError::MissingLabel(k) => write!(f, "the sandbox has no label {k:?}"),
            ExpandError::BadSecretName(n) => write!(f, "{n:?} is not a valid secret name"),
        }
    }
}

/// Deepest nesting of placeholders.
const MAX_DEPTH: usize = 4;

impl Template {
    pub fn parse(s: &str) -> Result<Template, String> {
        let chars: Vec<char> = s.chars().collect();
        let mut pos = 0;
        let t = parse_parts(&chars, &mut pos, 0)?;
        if pos != chars.len() {
            return Err(format!("unexpected }} at character {pos}"));
        }
        Ok(t)
    }

    /// Secret names written out in full (not built from other placeholders).
    pub fn literal_secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.0 {
            match p {
                Part::Secret(t) => match t.0.as_slice() {
                    [Part::Text(name)] => out.push(name.clone()),
                    _ => out.extend(t.literal_secrets()),
                },
                Part::Label(t) => out.extend(t.literal_secrets()),
                _ => {}
            }
        }
        out
    }

    /// Whether it names any secret (then its expansion must never be logged).
    pub fn has_secret(&self) -> bool {
        self.0.iter().any(|p| match p {
            Part::Secret(_) => true,
            Part::Label(t) => t.has_secret(),
            _ => false,
        })
    }

    pub fn expand(&self, ctx: &dyn TemplateContext) -> Result<String, ExpandError> {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::SandboxId => out.push_str(ctx.sandbox_id()),
                Part::Label(k) => {
                    let key = k.expand(ctx)?;
                    let v = ctx
                        .label(&key)
                        .ok_or_else(|| ExpandError::MissingLabel(key.clone()))?;
                    out.push_str(v);
                }
                Part::Secret(n) => {
                    let name = n.expand(ctx)?;
                    if !super::is_secret_name(&name) {
                        return Err(ExpandError::BadSecretName(name));
                    }
                    let v = ctx
                        .secret(&name)
                        .ok_or_else(|| ExpandError::MissingSecret(name.clone()))?;
                    out.push_str(&v);
                }
            }
        }
        Ok(out)
    }
}

/// Parts up to the end of input (depth 0) or the `}` closing a placeholder (left unread).
fn parse_parts(c: &[char], pos: &mut usize, depth: usize) -> Result<Template, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    while *pos < c.len() {
        if c[*pos] == '}' {
            if depth == 0 {
                // A lone `}` at the top is text.
                text.push('}');
                *pos += 1;
                continue;
            }
            break;
        }
        if c[*pos] == '$' && c.get(*pos + 1) == Some(&'{') {
            if depth >= MAX_DEPTH {
                return Err(format!("placeholders nest deeper than {MAX_DEPTH}"));
            }
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            *pos += 2;
            parts.push(parse_placeholder(c, pos, depth + 1)?);
            continue;
        }
        text.push(c[*pos]);
        *pos += 1;
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(Template(parts))
}

/// After `${`: one placeholder up to and including its `}`.
fn parse_placeholder(c: &[char], pos: &mut usize, depth: usize) -> Result<Part, String> {
    let rest: String = c[*pos..].iter().collect();
    let (kind, skip) = if rest.starts_with("secret:") {
        ("secret", "secret:".len())
    } else if rest.starts_with("sandbox.label.") {
        ("label", "sandbox.label.".len())
    } else if rest.starts_with("sandbox.id}") {
        ("id", "sandbox.id".len())
    } else {
        let shown: String = rest.chars().take(24).collect();
        return Err(format!(
            "unknown placeholder ${{{shown}…: use ${{secret:NAME}}, ${{sandbox.id}} or ${{sandbox.label.KEY}}"
        ));
    };
    *pos += skip;
    let inner = if kind == "id" {
        Template(Vec::new())
    } else {
        parse_parts(c, pos, depth)?
    };
    if c.get(*pos) != Some(&'}') {
        return Err("a placeholder is not closed with }".into());
    }
    *pos += 1;
    match kind {
        "id" => Ok(Part::SandboxId),
        _ if inner.0.is_empty() => Err(format!("${{{kind}…}} needs a name")),
        "secret" => Ok(Part::Secret(inner)),
        _ => Ok(Part::Label(inner)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Ctx {
        labels: BTreeMap<String, String>,
        secrets: BTreeMap<String, String>,
    }

    impl TemplateContext for Ctx {
        fn sandbox_id(&self) -> &str {
            "sb-1"
        }
        fn label(&self, key: &str) -> Option<&str> {
            self.labels.get(key).map(String::as_str)
        }
        fn secret(&self, name: &str) -> Option<String> {
            self.secrets.get(name).cloned()
        }
    }

    fn ctx() -> Ctx {
        Ctx {
            labels: BTreeMap::from([("team".into(), "red".into())]),
            secrets: BTreeMap::from([
                ("token-red".into(), "t-red".into()),
                ("plain".into(), "p".into()),
            ]),
        }
    }

    fn expand(s: &str) -> Result<String, ExpandError> {
        Template::parse(s).unwrap().expand(&ctx())
    }

    #[test]
    fn placeholders_expand_also_nested() {
        assert_eq!(expand("Bearer ${secret:plain}").unwrap(), "Bearer p");
        assert_eq!(
            expand("${secret:token-${sandbox.label.team}}").unwrap(),
            "t-red"
        );
        assert_eq!(
            expand("id=${sandbox.id}; team=${sandbox.label.team}").unwrap(),
            "id=sb-1; team=red"
        );
        assert_eq!(expand("$5 {x} $").unwrap(), "$5 {x} $");
    }

    #[test]
    fn a_missing_secret_or_label_fails_instead_of_expanding_to_nothing() {
        assert_eq!(
            expand("Bearer ${secret:nope}"),
            Err(ExpandError::MissingSecret("nope".into()))
        );
        assert_eq!(
            expand("${secret:token-${sandbox.label.tier}}"),
            Err(ExpandError::MissingLabel("tier".into()))
        );
        let mut c = ctx();
        c.labels.insert("team".into(), "a/b".into());
        assert_eq!(
            Template::parse("${secret:t-${sandbox.label.team}}")
                .unwrap()
                .expand(&c),
            Err(ExpandError::BadSecretName("t-a/b".into()))
        );
    }

    #[test]
    fn malformed_templates_are_refused() {
        for bad in [
            "${secret:}",
            "${secret:x",
            "${sandbox.idx}",
            "${other}",
            "${sandbox.label.}",
            "${secret:${secret:${secret:${secret:${secret:x}}}}}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn templates_say_whether_they_hold_a_secret() {
        assert!(Template::parse("a ${secret:x}").unwrap().has_secret());
        assert!(!Template::parse("a ${sandbox.id}").unwrap().has_secret());
    }
}
