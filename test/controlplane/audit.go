package controlplane

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// AuditLog is the API server's audit log in Dir: one JSON event per line,
// kept across RestartAPIServer.
const AuditLog = "audit.log"

// auditPolicy records the requests whose count tests check: every
// binding of a pod to a node and every eviction, with the user who made
// it and the response code. Nothing else is recorded.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create]
  resources:
  - group: ""
    resources: [pods/binding, pods/eviction]
- level: None
`

// AuditEvents returns the audited requests (bindings and evictions) so far,
// at their ResponseComplete stage.
func (cp *ControlPlane) AuditEvents() ([]auditv1.Event, error) {
	f, err := os.Open(filepath.Join(cp.Dir, AuditLog))
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// The API server was stopped in the middle of a line.
			continue
		}
		if e.Stage != auditv1.StageResponseComplete {
			continue
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", AuditLog, err)
	}
	return events, nil
}
