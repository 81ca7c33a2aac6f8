// mdcheck: Headroom's Markdown read by a CommonMark parser (make verify). A
// module of its own, so that the parser never enters the main module's go.mod.
module github.com/headroom-k8s/headroom/hack/tools/mdcheck

go 1.26.0

require github.com/yuin/goldmark v1.8.7
