package claim

const LeaseSQLForTest = leaseSQL
const LeaseDiagSQLForTest = leaseDiagSQL
