package nodepids

import "testing"

// The benchmarks are figuretest.Bench's, with this figure's parameters
// (bench).

func BenchmarkFilter(b *testing.B)            { bench.Filter(b) }
func BenchmarkScore(b *testing.B)             { bench.Score(b) }
func BenchmarkNormalizeScore(b *testing.B)    { bench.NormalizeScore(b) }
func BenchmarkCacheBytesPerNode(b *testing.B) { bench.CacheBytesPerNode(b) }
