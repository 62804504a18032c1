module github.com/symm-mcp/symm-mcp

go 1.25.0

require (
	github.com/coder/acp-go-sdk v0.13.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
