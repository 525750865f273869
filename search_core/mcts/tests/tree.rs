use std::io::Write;

use kf_mcts::{DurableTree, NodeStatus, SearchConfig, SearchError, Tree};

/// A seeded mix of asks, expansions, results and cancellations.
fn drive(tree: &mut DurableTree, seed: u64, operations: usize) {
    let mut rng = kf_mcts::SplitMix64::new(seed);
    for _ in 0..operations {
        for parent in tree.ask(2).expect("ask") {
            let child = tree.add_child(parent).expect("add_child");
            match rng.below(10) {
                0 => tree.tell(child, false, None, None).expect("tell failed"),
                1 => tree.cancel(child).expect("cancel"),
                r => tree
                    .tell(
                        child,
                        true,
                        Some(20.0 + (rng.next_u64() % 1000) as f64 / 10.0 + r as f64),
                        Some(0.5),
                    )
                    .expect("tell"),
            }
        }
    }
}

fn temp_log(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kf-mcts-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("search.log")
}

#[test]
fn results_back_propagate_and_best_is_the_fastest() {
    let mut tree = Tree::new(SearchConfig::default(), 100.0).expect("tree");
    let a = tree.add_child(0).expect("child");
    tree.tell(a, true, Some(50.0), None).expect("tell");
    let b = tree.add_child(a).expect("grandchild");
    tree.tell(b, false, None, None).expect("tell");
    assert_eq!(tree.best(), Some(a));
    assert_eq!(tree.node(0).expect("root").visits, 3);
    assert_eq!(tree.node(b).expect("b").status, NodeStatus::Failed);
    assert_eq!(tree.ancestors(b).expect("ancestors"), vec![a, 0]);
    assert!(matches!(
        tree.add_child(b),
        Err(SearchError::InvalidState(_))
    ));
    assert!(matches!(
        tree.tell(a, true, Some(1.0), None),
        Err(SearchError::InvalidState(_))
    ));
    assert!(matches!(tree.node(99), Err(SearchError::UnknownNode(99))));
}

#[test]
fn bad_results_are_rejected_without_changing_the_tree() {
    let mut tree = Tree::new(SearchConfig::default(), 100.0).expect("tree");
    let child = tree.add_child(0).expect("child");
    let before = tree.clone();
    for (passed, latency) in [
        (true, None),
        (true, Some(-1.0)),
        (true, Some(f64::NAN)),
        (false, Some(3.0)),
    ] {
        assert!(matches!(
            tree.tell(child, passed, latency, None),
            Err(SearchError::InvalidArgument(_))
        ));
    }
    assert_eq!(tree, before);
    assert!(Tree::new(
        SearchConfig {
            widen_alpha: 2.0,
            ..SearchConfig::default()
        },
        1.0
    )
    .is_err());
}

#[test]
fn snapshots_round_trip_exactly() {
    let mut tree = DurableTree::create(
        SearchConfig {
            seed: 9,
            ..SearchConfig::default()
        },
        80.0,
        None,
        1000,
    )
    .expect("tree");
    drive(&mut tree, 1, 300);
    let data = tree.tree().snapshot();
    let restored = Tree::restore(&data).expect("restore");
    assert_eq!(&restored, tree.tree());
    assert_eq!(restored.snapshot(), data);
    assert!(Tree::restore(b"{}").is_err());
}

#[test]
fn a_reopened_log_is_the_same_tree_even_after_a_torn_write() {
    let log = temp_log("reopen");
    let mut tree =
        DurableTree::create(SearchConfig::default(), 100.0, Some(&log), 17).expect("tree");
    drive(&mut tree, 2, 200);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("log");
    file.write_all(b"{\"op\":\"ask\",\"n\"")
        .expect("torn write");
    let reopened = DurableTree::open(&log, 17).expect("open");
    assert_eq!(reopened.tree(), tree.tree());
    assert!(DurableTree::create(SearchConfig::default(), 100.0, Some(&log), 17).is_err());
}

#[test]
fn an_annealed_search_reopens_identically_and_old_configs_still_load() {
    let annealed = SearchConfig {
        seed: 4,
        widen_alpha: 0.7,
        widen_alpha_end: Some(0.2),
        widen_anneal_evaluations: 50,
        ..SearchConfig::default()
    };
    let log = temp_log("annealed");
    let mut tree = DurableTree::create(annealed.clone(), 100.0, Some(&log), 13).expect("tree");
    drive(&mut tree, 3, 150);
    let reopened = DurableTree::open(&log, 13).expect("open");
    assert_eq!(reopened.tree(), tree.tree());
    assert_eq!(reopened.tree().config(), &annealed);

    // A config without the annealing fields (as written before they existed) means a fixed α.
    let plain = Tree::new(SearchConfig::default(), 100.0).expect("tree");
    let data = String::from_utf8(plain.snapshot()).expect("utf-8");
    assert!(!data.contains("widen_alpha_end") && !data.contains("widen_anneal"));
    assert_eq!(
        Tree::restore(data.as_bytes()).expect("restore").config(),
        &SearchConfig::default()
    );
    let bad = SearchConfig {
        widen_alpha_end: Some(0.5),
        ..SearchConfig::default()
    };
    assert!(matches!(
        Tree::new(bad, 1.0),
        Err(SearchError::InvalidArgument(m)) if m.contains("widen_anneal_evaluations")
    ));
}
