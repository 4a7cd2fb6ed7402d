//! A group's warnings on the status page: the bad annotation values (and what baton does
//! instead) that the planner and the gates otherwise tell only in Warning Events, which expire
//! and which nobody watching a rollout reads. Apart from the page's layout, which changes for
//! other reasons; every string goes through maud's escaping like the rest of the page.

use maud::{Markup, html};

use baton_core::status::model::GroupStatus;

/// The list of `group`'s warnings, nothing when it has none.
pub fn section(group: &GroupStatus) -> Markup {
    html! {
        @if !group.warnings.is_empty() {
            ul.warnings {
                @for warning in &group.warnings {
                    li.warning data-kind=(warning.kind) {
                        "Warning: " (warning.message) " " code { "(" (warning.kind) ")" }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::status::model::{GroupWarning, RolloutPhase};

    #[test]
    fn each_warning_is_listed_escaped_with_its_kind() {
        let mut group = GroupStatus {
            name: "ingester".to_owned(),
            namespace: None,
            phase: RolloutPhase::Rolling,
            zones: Vec::new(),
            waiting: None,
            last_actions: Vec::new(),
            rollback: None,
            warnings: Vec::new(),
            timeline: None,
            check: None,
        };
        assert_eq!(section(&group).into_string(), "");
        group.warnings.push(GroupWarning {
            kind: "InvalidAnnotation".to_owned(),
            statefulset: Some("ingester-zone-a".to_owned()),
            message: "annotation rollout-max-unavailable has the invalid value \"<b>abc\"; using 1"
                .to_owned(),
        });
        let html = section(&group).into_string();
        assert!(html.contains(r#"data-kind="InvalidAnnotation""#), "{html}");
        assert!(html.contains("&lt;b&gt;abc"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(html.contains("using 1"), "{html}");
    }
}
