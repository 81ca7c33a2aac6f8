package app

import (
	"strings"
	"testing"
)

// The shells' scripts come from cobra: each names the command it completes.
func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash":       "__start_kubectl-headroom",
		"zsh":        "#compdef kubectl-headroom",
		"fish":       "complete -c kubectl-headroom",
		"powershell": "Register-ArgumentCompleter -CommandName 'kubectl-headroom'",
	} {
		out, err := run(t, headroomCluster(), "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: err %v, script lacks %q", shell, err, want)
		}
	}
}

// complete runs cobra's __complete, as the shells' scripts (and kubectl,
// through kubectl_complete-headroom) do, and returns the candidates.
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := run(t, headroomCluster(), append([]string{"__complete"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The last line is cobra's directive (:4 is NoFileComp).
	if len(lines) == 0 || lines[len(lines)-1] != ":4" {
		t.Errorf("__complete %v: directive %q, want :4 (no files)", args, lines[len(lines)-1])
	}
	return lines[:len(lines)-1]
}

func TestCompletionOfNodesAndFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "node", ""}, "blank broken roomy short"},
		{[]string{"explain", "node", "b"}, "blank broken"},
		{[]string{"explain-oom", "s"}, "short"},
		{[]string{"evictions", "r"}, "roomy"},
		// One node only.
		{[]string{"evictions", "roomy", ""}, ""},
		{[]string{"nodes", "--sort-by", "pid-"}, "pid-capacity pid-allocatable pid-used pid-free"},
		{[]string{"nodes", "-o", "j"}, "json jsonpath jsonpath-as-json jsonpath-file"},
		{[]string{"nodes", "-o", "w"}, "wide"},
	} {
		got := strings.Join(complete(t, tc.args...), " ")
		if got != tc.want {
			t.Errorf("__complete %q: %q, want %q", tc.args, got, tc.want)
		}
	}
}
