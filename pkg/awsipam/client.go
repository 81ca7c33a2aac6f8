package awsipam

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxBodyBytes bounds an answer of ipamd read: /v1/enis of the largest
// instance with every address assigned is some 2 MB.
const MaxBodyBytes = 16 << 20

// ParseMetrics reads ipamd's limits from its Prometheus text exposition.
func ParseMetrics(b []byte) (Limits, error) {
	fams, err := parseText(b)
	if err != nil {
		return Limits{}, fmt.Errorf("ipamd metrics: %w", err)
	}
	var l Limits
	eniMax, okENI := gauge(fams["awscni_eni_max"])
	ipMax, okIP := gauge(fams["awscni_ip_max"])
	if !okENI || !okIP || !(eniMax >= 1 && eniMax <= maxCount) || !(ipMax >= 0 && ipMax <= maxCount) { // NaN fails too
		return Limits{}, fmt.Errorf("%w (awscni_eni_max %v, awscni_ip_max %v)", ErrNoLimits, eniMax, ipMax)
	}
	l.MaxENIs = int64(eniMax)
	l.IPsPerENI = int64(ipMax) / l.MaxENIs
	if f := fams["awscni_aws_api_error_count"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "error" && slices.Contains(SubnetFullCodes, lp.GetValue()) {
					l.SubnetFullErrors += m.GetCounter().GetValue()
				}
			}
		}
	}
	return l, nil
}

// parseText is expfmt's text parser, which panics on some malformed input
// (prometheus/common v0.67.5: a comment line, then a line starting with
// "{"): that is an error here.
func parseText(b []byte) (fams map[string]*dto.MetricFamily, err error) {
	defer func() {
		if r := recover(); r != nil {
			fams, err = nil, fmt.Errorf("malformed text exposition (%v)", r)
		}
	}()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(b))
}

func gauge(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil {
		return 0, false
	}
	return f.GetMetric()[0].GetGauge().GetValue(), true
}

// Reader asks one node's ipamd for its figures. It remembers ipamd's count
// of exhausted-subnet errors between reads, to tell when it grew. Not safe
// for concurrent use.
type Reader struct {
	// IntrospectionAddress and MetricsAddress are host:port of ipamd's
	// introspection and metrics servers.
	IntrospectionAddress, MetricsAddress string
	Cooldown                             time.Duration
	SubnetFullFor                        time.Duration
	Client                               *http.Client

	lastErrors   float64
	seenErrors   bool
	subnetFullAt time.Time
}

// Read fetches /v1/enis and the metrics and computes the figures at now.
func (r *Reader) Read(ctx context.Context, now time.Time) (Usage, error) {
	enis, err := r.get(ctx, "http://"+r.IntrospectionAddress+"/v1/enis")
	if err != nil {
		return Usage{}, err
	}
	pool, err := ParseENIs(enis, now, r.Cooldown)
	if err != nil {
		return Usage{}, err
	}
	text, err := r.get(ctx, "http://"+r.MetricsAddress+"/metrics")
	if err != nil {
		return Usage{}, err
	}
	limits, err := ParseMetrics(text)
	if err != nil {
		return Usage{}, err
	}
	return Figures(pool, limits, r.subnetFull(limits.SubnetFullErrors, now)), nil
}

// subnetFull tells whether ipamd met an exhausted subnet within
// SubnetFullFor: its error count grew since the last read, or, at the
// first read, is not zero (when it grew is not known: taken as now).
func (r *Reader) subnetFull(errors float64, now time.Time) bool {
	if errors > r.lastErrors || (!r.seenErrors && errors > 0) {
		r.subnetFullAt = now
	}
	r.lastErrors, r.seenErrors = errors, true
	return !r.subnetFullAt.IsZero() && now.Sub(r.subnetFullAt) < r.SubnetFullFor
}

func (r *Reader) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	c := r.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking ipamd: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ipamd %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("ipamd %s: %w", url, err)
	}
	if len(b) > MaxBodyBytes {
		return nil, fmt.Errorf("ipamd %s: answer longer than %d bytes", url, MaxBodyBytes)
	}
	return b, nil
}
