// Closed loop over a multi-address target with a given service config; prints per-node counts as JSON.
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');
const [target, scJson, seconds, concurrency, protoPath] = process.argv.slice(2);
const def = loader.loadSync(protoPath, {keepCase: true});
const pkg = grpc.loadPackageDefinition(def).npudure.v1;
const client = new pkg.Inference(target, grpc.credentials.createInsecure(), {
  'grpc.service_config': scJson, 'grpc.max_send_message_length': 16 << 20,
  'grpc.max_receive_message_length': 16 << 20, 'grpc.per_rpc_retry_buffer_size': 8 << 20});
const frame = Buffer.alloc(640 * 640 * 3);
const nodes = {}; let errors = {}; let stop = false; let done = 0;
function one() {
  if (stop) return;
  client.Infer({encoding: 1, frame}, {deadline: Date.now() + 30000}, (err, reply) => {
    if (err) errors[err.code + ' ' + err.details] = (errors[err.code + ' ' + err.details] || 0) + 1;
    else { nodes[reply.node] = (nodes[reply.node] || 0) + 1; done++; }
    one();
  });
}
client.waitForReady(Date.now() + 10000, (e) => {
  if (e) { console.log(JSON.stringify({error: String(e)})); process.exit(1); }
  const t0 = Date.now();
  for (let i = 0; i < +concurrency; i++) one();
  setTimeout(() => { stop = true; setTimeout(() => {
    console.log(JSON.stringify({nodes, errors, rps: done / ((Date.now() - t0) / 1000)})); process.exit(0); }, 3000); }, seconds * 1000);
});
