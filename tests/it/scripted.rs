//! [`ScriptedGenerator`]: a deterministic FAKE generator for tests. It plays canned steps in
//! order and records every request it receives, so a test can assert how many calls happened
//! (e.g. that a repair call did or did not happen) and what prompts they carried.
//!
//! Invariants: step `n` answers call `n`; past the end of the script the last step repeats; an
//! empty script answers every call with [`GeneratorError::Refused`]; delays are async sleeps,
//! so a caller's timeout cuts them.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};

/// One canned reaction of a [`ScriptedGenerator`].
#[derive(Clone, Debug)]
pub enum ScriptStep {
    /// Return this raw model output.
    Output(String),
    /// Sleep (asynchronously) for the duration, then play the inner step.
    Delay(Duration, Box<ScriptStep>),
    /// Fail with this error.
    Error(GeneratorError),
}

impl ScriptStep {
    /// Shorthand for [`ScriptStep::Output`].
    pub fn output(text: impl Into<String>) -> Self {
        Self::Output(text.into())
    }

    /// This step played after an async sleep of `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        Self::Delay(delay, Box::new(self))
    }
}

/// Test fake: answers call `n` with step `n` of its script, repeating the last step past the end.
#[derive(Debug)]
pub struct ScriptedGenerator {
    steps: Vec<ScriptStep>,
    calls: Mutex<Vec<GenerationRequest>>,
}

impl ScriptedGenerator {
    /// A fake playing `steps` in order (an empty script refuses every call).
    pub fn new(steps: Vec<ScriptStep>) -> Self {
        Self { steps, calls: Mutex::new(Vec::new()) }
    }

    /// Every request received so far, in order (including calls cut by a caller's timeout).
    pub fn calls(&self) -> Vec<GenerationRequest> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// Number of requests received so far.
    pub fn call_count(&self) -> usize {
        self.calls.lock().expect("calls lock").len()
    }
}

#[async_trait]
impl Generator for ScriptedGenerator {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        let index = {
            let mut calls = self.calls.lock().expect("calls lock");
            calls.push(request.clone());
            calls.len() - 1
        };
        let Some(mut step) = self.steps.get(index).or(self.steps.last()) else {
            return Err(GeneratorError::Refused("empty script".into()));
        };
        loop {
            match step {
                ScriptStep::Output(text) => return Ok(text.clone()),
                ScriptStep::Error(error) => return Err(error.clone()),
                ScriptStep::Delay(delay, inner) => {
                    tokio::time::sleep(*delay).await;
                    step = inner;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(user: &str) -> GenerationRequest {
        GenerationRequest {
            system: "system".into(),
            user: user.into(),
            question: user.into(),
            sources: Vec::new(),
            schema: serde_json::json!({}),
            repair: None,
            previous: None,
            timeout: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn steps_play_in_order_then_the_last_repeats() {
        let generator = ScriptedGenerator::new(vec![
            ScriptStep::output("first"),
            ScriptStep::Error(GeneratorError::Status { status: 500 }),
        ]);
        assert_eq!(generator.generate(&request("one")).await.unwrap(), "first");
        assert_eq!(generator.generate(&request("two")).await, Err(GeneratorError::Status { status: 500 }));
        assert_eq!(generator.generate(&request("three")).await, Err(GeneratorError::Status { status: 500 }));
        let users: Vec<String> = generator.calls().into_iter().map(|call| call.user).collect();
        assert_eq!(users, ["one", "two", "three"]);
        assert_eq!(generator.call_count(), 3);
    }

    #[tokio::test]
    async fn empty_script_refuses() {
        let generator = ScriptedGenerator::new(Vec::new());
        assert!(matches!(generator.generate(&request("q")).await, Err(GeneratorError::Refused(_))));
        assert_eq!(generator.call_count(), 1);
    }

    #[tokio::test]
    async fn delay_is_async_so_a_timeout_cuts_it() {
        let generator = ScriptedGenerator::new(vec![
            ScriptStep::output("late").delayed(Duration::from_secs(60)),
            ScriptStep::output("soon").delayed(Duration::from_millis(1)),
        ]);
        let cut = tokio::time::timeout(Duration::from_millis(10), generator.generate(&request("q"))).await;
        assert!(cut.is_err());
        assert_eq!(generator.generate(&request("again")).await.unwrap(), "soon");
        assert_eq!(generator.call_count(), 2);
    }
}
