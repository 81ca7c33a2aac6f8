// Package deleteorder is the order in which Headroom's descheduler plugin
// evicts pods: the order in which the ReplicaSet controller deletes pods on
// scale-down, with a delete-priority annotation tried before every upstream
// rule.
//
// Sort puts the pod to evict first at index 0. Two pods are compared by the
// first of these rules that tells them apart:
//
//  0. Delete priority: the pod whose controller.alpha.kubernetes.io/delete-priority
//     annotation (the key is configurable, see Order) holds the higher int32
//     goes first. A missing, malformed or out-of-range value counts as 0.
//     Values are read as base-10 integers ("+5" and "007" are 5 and 7);
//     surrounding whitespace makes a value malformed.
//  1. Unscheduled pods (no spec.nodeName) go before scheduled ones.
//  2. Phase: Pending before Unknown before Running (Succeeded, Failed and an
//     empty phase count as Pending).
//  3. Not ready before ready.
//  4. Lower controller.kubernetes.io/pod-deletion-cost first (PodDeletionCost
//     feature gate, on by default). A missing or invalid cost counts as 0;
//     upstream rejects a leading "+" or leading zeros here.
//  5. Doubled up first: the pod with more active pods of its own controller
//     on its node goes first (see Ranks; an owner is its namespace and UID).
//  6. Both ready: the pod that became ready more recently goes first; a
//     ready pod without a ready time goes first.
//  7. More container restarts first (regular containers, then sidecars).
//  8. Newer first; a pod without a creation time goes first.
//
// Rules 1 to 8 are not re-implemented here: they are the ReplicaSet
// controller's own comparator, controller.ActivePodsWithRanks from
// k8s.io/kubernetes, so Headroom's order follows upstream when Kubernetes is
// updated. Upstream compares the times of rules 6 and 8 by their age relative
// to the time given to Sort, on a base-2 logarithmic scale (LogarithmicScaleDown,
// GA and locked on): two different times of the same power-of-two age bucket
// are ordered by pod UID, smaller first, so within a bucket age does not
// count. Exactly equal times fall through to the next rule, which makes the
// comparison non-transitive for some sets of pods; their order then depends
// on the input order.
//
// Pods that none of the rules tell apart keep their relative input order.
//
// Rule 0 and rule 4 read annotations whoever may edit a workload's pods
// writes; the ReplicaSet controller compares them only among one
// ReplicaSet's pods. SortNeutral is the order without both, for ordering
// pods of different workloads.
package deleteorder
