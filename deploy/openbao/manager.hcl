# The manager's OpenBao policy (role ayatori-manager): it generates, reads
# (to prove a login), versions and destroys the Tenants' KV v2 records, all
# under the tenant base path and nowhere else.
path "{{.KVMount}}/data/{{.BasePath}}/*" {
  capabilities = ["create", "read", "update", "delete"]
}
path "{{.KVMount}}/metadata/{{.BasePath}}/*" {
  capabilities = ["create", "read", "update", "delete", "list"]
}
path "{{.KVMount}}/destroy/{{.BasePath}}/*" {
  capabilities = ["update"]
}
