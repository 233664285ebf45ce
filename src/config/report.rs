//! `hivegate config check`: the effective configuration as TOML, each value followed by where it came from
//! (the default, the file, or the environment variable that set it), secrets redacted.

use std::fmt::Write as _;

use anyhow::Context;
use figment::Figment;

use super::{DEFAULT_CONFIG_PATH, Loaded};

/// The configuration of `loaded` as a TOML document: a header naming the file read (or saying none was),
/// then every key with a value, each with its source as a comment. Optional keys left unset are not shown.
pub fn render(loaded: &Loaded) -> anyhow::Result<String> {
    let value = toml::Value::try_from(&loaded.config).context("rendering the configuration as TOML")?;
    let toml::Value::Table(table) = value else { anyhow::bail!("the configuration did not render as a table") };
    let mut out = String::new();
    match &loaded.file {
        Some(file) => writeln!(out, "# configuration file: {}", file.display())?,
        None => {
            writeln!(out, "# no configuration file ({DEFAULT_CONFIG_PATH} does not exist and --config was not given)")?
        }
    }
    writeln!(out, "# every value is followed by its source: default, file, or the environment variable that set it")?;
    write_table(&mut out, &loaded.figment, &[], &table)?;
    Ok(out)
}

/// The plain values of `table` (at `path`), then its tables as sections of their own.
fn write_table(out: &mut String, figment: &Figment, path: &[&str], table: &toml::Table) -> anyhow::Result<()> {
    for (key, value) in table.iter().filter(|(_, value)| !value.is_table()) {
        let mut key_path = path.to_vec();
        key_path.push(key);
        writeln!(out, "{} = {value}  # {}", toml_key(key), source(figment, &key_path))?;
    }
    for (key, value) in table {
        if let toml::Value::Table(inner) = value {
            let mut key_path = path.to_vec();
            key_path.push(key);
            let header: Vec<String> = key_path.iter().map(|part| toml_key(part)).collect();
            writeln!(out, "\n[{}]", header.join("."))?;
            write_table(out, figment, &key_path, inner)?;
        }
    }
    Ok(())
}

/// `key` as TOML writes it: bare when it can be, else quoted (an agent id in `audit.agent_retention_days`).
pub(super) fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        key.to_owned()
    } else {
        toml::Value::String(key.to_owned()).to_string()
    }
}

/// Where the value at `path` came from.
fn source(figment: &Figment, path: &[&str]) -> String {
    match figment.find_metadata(&path.join(".")) {
        Some(metadata) if matches!(metadata.source, Some(figment::Source::File(_))) => "file".to_owned(),
        Some(metadata) if metadata.name.contains("environment") => {
            format!("environment ({})", environment_variable(path))
        }
        _ => "default".to_owned(),
    }
}

/// The environment variable that sets the key at `path`: `HIVEGATE_<SECTION>__<KEY>`.
pub(super) fn environment_variable(path: &[&str]) -> String {
    format!("HIVEGATE_{}", path.join("__").to_uppercase())
}
