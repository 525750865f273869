use kf_mcts::{NodeStatus, SearchConfig, SearchError, Tree};

/// A seeded mix of asks, expansions, results and cancellations.
fn drive(tree: &mut Tree, seed: u64, operations: usize) {
    let mut rng = kf_mcts::SplitMix64::new(seed);
    for _ in 0..operations {
        for parent in tree.ask(2) {
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
    let mut tree = Tree::new(
        SearchConfig {
            seed: 9,
            ..SearchConfig::default()
        },
        80.0,
    )
    .expect("tree");
    drive(&mut tree, 1, 300);
    let data = tree.snapshot();
    let mut restored = Tree::restore(&data).expect("restore");
    assert_eq!(restored, tree);
    assert_eq!(restored.snapshot(), data);
    // the restored tree rebuilds its selection terms and keeps choosing the same
    drive(&mut restored, 2, 100);
    drive(&mut tree, 2, 100);
    assert_eq!(restored, tree);
    assert!(matches!(
        Tree::restore(b"{}"),
        Err(SearchError::InvalidSnapshot(_))
    ));
}

#[test]
fn an_annealed_search_restores_identically_and_old_configs_still_load() {
    let annealed = SearchConfig {
        seed: 4,
        widen_alpha: 0.7,
        widen_alpha_end: Some(0.2),
        widen_anneal_evaluations: 50,
        ..SearchConfig::default()
    };
    let mut tree = Tree::new(annealed.clone(), 100.0).expect("tree");
    drive(&mut tree, 3, 150);
    let restored = Tree::restore(&tree.snapshot()).expect("restore");
    assert_eq!(restored, tree);
    assert_eq!(restored.config(), &annealed);

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
