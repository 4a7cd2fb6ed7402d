//! How a scaling pass tells: every explanation the pass decided becomes an Event on the
//! StatefulSet concerned, through the explainer (off the critical path, repeats filtered). The
//! wording is the core's ([`baton_core::scaling::pass`]).

use kube::Resource;

use super::Pass;
use crate::explain::Explanation;

impl Pass<'_> {
    pub(super) async fn say(&self, statefulset: &str, explanation: Explanation) {
        let Some(object) = self.statefulset(statefulset) else {
            return;
        };
        self.explainer
            .tell(&object.object_ref(&()), explanation)
            .await;
    }
}
