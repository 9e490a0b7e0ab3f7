"""Who may do what: TLS channels and the admin check (access), the small CA (pki, `npudure pki`)."""
